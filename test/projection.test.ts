import { env, runInDurableObject } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import type { ServerLedger } from "../src/ledger/durable-object";
import { buildProjection, INDEX_LEASE_MS, projectionStatements } from "../src/ledger/projection";
import { getDb } from "../src/db/client";
import type { DesiredState, ServerRecord } from "../src/model/server/record";
import type { StoredReport } from "../src/model/server/schemas";
import {
  breakD1,
  call,
  createFleet,
  d1Rows,
  d1Statements,
  fireTimersNow,
  pendingEffects,
  registerServer,
  report,
  settle,
  timeOutD1AfterCommit,
} from "./helpers";
import { meterReading, resetMeter } from "../src/local/meter";

const agents = [
  { name: "compute", image: "compute:1", version: "1" },
  { name: "logs", image: "logs:1", version: "1" },
];

async function realizedServer() {
  const fleet = await createFleet();
  const s = await registerServer(fleet.id);
  await call("PUT", `/v1/servers/${s.id}/desired`, { body: { generation: 2, agents } });
  const r = await call("PUT", "/v1/agent/inventory", { token: s.token, body: report(2, agents) });
  expect(r.json.status).toBe("realized");
  return { fleet, s };
}

async function indexRow(id: string) {
  return env.DB.prepare("SELECT status, desired_generation, reported_generation, last_seen FROM servers WHERE id = ?")
    .bind(id)
    .first<{ status: string; desired_generation: number; reported_generation: number | null; last_seen: number }>();
}

/** The server's status as GET /v1/servers answers it (staleness is read from stale_at then). */
async function listedStatus(fleet: string, id: string) {
  return (await call("GET", `/v1/servers?fleet=${fleet}`)).json.items.find((x: { id: string }) => x.id === id)?.status;
}

/** The report that turns a realized server drifted: its second agent stopped. */
const reportDrifting = (s: { token: string }) =>
  call("PUT", "/v1/agent/inventory", {
    token: s.token,
    body: report(2, [agents[0], { ...agents[1], state: "stopped" }]),
  });

/** D1 takes a drifting report's batch but the ledger never hears so: its mark still says realized. */
async function driftTakenUnanswered(s: { id: string; token: string }) {
  const stub = env.LEDGER.get(env.LEDGER.idFromName(s.id));
  const restore = await timeOutD1AfterCommit(stub);
  const drifted = await reportDrifting(s);
  expect(drifted.status).toBe(200);
  await settle(s.id);
  expect((await indexRow(s.id))!.status).toBe("drifted");
  expect(await pendingEffects(stub)).toBeGreaterThan(0);
  return { stub, restore };
}

describe("D1 projection of the ledger", () => {
  it("costs no D1 write for a report that changes nothing the index shows", async () => {
    const { s } = await realizedServer();
    const before = await d1Statements();
    for (let i = 0; i < 10; i++) {
      const r = await call("PUT", "/v1/agent/inventory", { token: s.token, body: report(2, agents) });
      expect(r.status).toBe(200);
    }
    expect((await d1Statements()).writes).toBe(before.writes);

    // The counter is live: a report that changes the status does write.
    await reportDrifting(s);
    expect((await d1Statements()).writes).toBeGreaterThan(before.writes);
    expect((await indexRow(s.id))!.status).toBe("drifted");
  });

  it("writes only the columns a change moves: a status that moves rewrites the indexes holding it, not all of the row's", async () => {
    const { s } = await realizedServer();
    await settle(s.id);
    const ledgerRows = () =>
      (meterReading().objects.ServerLedger as { by_instance: Record<string, any> }).by_instance[
        env.LEDGER.idFromName(s.id).toString()
      ].d1.rows_written as number;
    resetMeter();
    // One agent stops: the server turns drifted and that agent's row moves its state and status.
    await reportDrifting(s);
    await settle(s.id);
    expect((await indexRow(s.id))!.status).toBe("drifted");
    // The server row with its four indexes on status, and the instance row without its two image
    // indexes: 6 rows (13 when both rows were upserted whole, every index rewritten).
    expect(ledgerRows()).toBeLessThanOrEqual(6);
  });

  it("refreshes last_seen in D1 once a lease has passed (the quiet watch watches meanwhile), not on every report", async () => {
    const { s } = await realizedServer();
    const stub = env.LEDGER.get(env.LEDGER.idFromName(s.id));
    const first = (await indexRow(s.id))!.last_seen;
    // Pretend the last refresh happened long ago.
    await runInDurableObject(stub, (_i: ServerLedger, state) => {
      const mark = state.storage.kv.get<any>("projected");
      (_i as any).parts.store.setProjected({ ...mark, last_seen_written: mark.last_seen_written - 10 * 60_000 });
    });
    await new Promise((r) => setTimeout(r, 5));
    const before = await d1Statements();
    // Ten minutes: within the lease, nothing to write.
    await call("PUT", "/v1/agent/inventory", { token: s.token, body: report(2, agents) });
    expect((await d1Statements()).writes).toBe(before.writes);
    await runInDurableObject(stub, (_i: ServerLedger, state) => {
      const mark = state.storage.kv.get<any>("projected");
      (_i as any).parts.store.setProjected({ ...mark, last_seen_written: mark.last_seen_written - INDEX_LEASE_MS });
    });
    await call("PUT", "/v1/agent/inventory", { token: s.token, body: report(2, agents) });
    expect((await d1Statements()).writes).toBe(before.writes + 1);
    expect((await indexRow(s.id))!.last_seen).toBeGreaterThan(first);
  });

  it("repairs the index from the alarm after D1 refused a projection, losing nothing acknowledged", async () => {
    const { s } = await realizedServer();
    const stub = env.LEDGER.get(env.LEDGER.idFromName(s.id));
    const restoreD1 = await breakD1(stub);

    const accepted = await call("PUT", `/v1/servers/${s.id}/desired`, {
      body: { generation: 3, agents: [{ name: "compute", image: "compute:2", version: "2" }] },
    });
    expect(accepted.status).toBe(200);
    expect((await indexRow(s.id))!.desired_generation).toBe(2);
    const alarmSet = await runInDurableObject(stub, (_i: ServerLedger, state) => state.storage.getAlarm());
    expect(alarmSet).not.toBeNull();
    expect(await pendingEffects(stub)).toBe(2); // the projection and the audit row

    // Still down: the alarm fails again and reschedules itself.
    await fireTimersNow(stub);
    expect((await indexRow(s.id))!.desired_generation).toBe(2);
    expect(await runInDurableObject(stub, (_i: ServerLedger, state) => state.storage.getAlarm())).not.toBeNull();

    await restoreD1();
    expect(await fireTimersNow(stub)).toBe(true);
    expect(await pendingEffects(stub)).toBe(0);
    const row = await indexRow(s.id);
    expect(row).toMatchObject({ desired_generation: 3, status: "pending" });
    const instances = await call("GET", `/v1/instances?server=${s.id}`);
    expect(instances.json.items.map((i: any) => [i.agent, i.status])).toEqual([
      ["compute", "pending"],
      ["logs", "removal_pending"],
    ]);
  });

  it("brings D1 back to the ledger's value when a batch committed without answering and a report moved the column back", async () => {
    const { fleet, s } = await realizedServer();
    await settle(s.id);
    const { stub, restore } = await driftTakenUnanswered(s);
    await restore();
    // Back to what the mark says: a diff against it would write nothing and leave "drifted".
    const back = await call("PUT", "/v1/agent/inventory", { token: s.token, body: report(2, agents) });
    expect(back.status).toBe(200);
    await settle(s.id);
    expect((await indexRow(s.id))!.status).toBe("realized");
    expect(await listedStatus(fleet.id, s.id)).toBe("realized");
    const instances = await call("GET", `/v1/instances?server=${s.id}`);
    expect(instances.json.items.map((i: any) => [i.agent, i.status])).toEqual([
      ["compute", "realized"],
      ["logs", "realized"],
    ]);
    expect(await pendingEffects(stub)).toBe(0);
  });

  it("writes full rows after a restart that found a projection an earlier instance may have sent", async () => {
    const { s } = await realizedServer();
    await settle(s.id);
    const { stub } = await driftTakenUnanswered(s);
    // Killed: the instance that knew its batch went unanswered is gone (and with it the broken D1).
    await runInDurableObject(stub, (_i, state) => state.abort("killed by test")).catch(() => undefined);
    const fresh = env.LEDGER.get(env.LEDGER.idFromName(s.id));
    const back = await call("PUT", "/v1/agent/inventory", { token: s.token, body: report(2, agents) });
    expect(back.status).toBe(200);
    await settle(s.id);
    expect((await indexRow(s.id))!.status).toBe("realized");
    expect(await pendingEffects(fresh)).toBe(0);
  });

  it("keeps writing the diff after a restart with nothing pending", async () => {
    const { s } = await realizedServer();
    await settle(s.id);
    const stub = env.LEDGER.get(env.LEDGER.idFromName(s.id));
    await runInDurableObject(stub, (_i, state) => state.abort("evicted by test")).catch(() => undefined);
    const rows = await d1Rows(async () => {
      const drifted = await reportDrifting(s);
      expect(drifted.status).toBe(200);
      await settle(s.id);
    });
    expect((await indexRow(s.id))!.status).toBe("drifted");
    // The two changed rows' changed columns (6 rows with their index entries), not every column
    // of every row (13).
    expect(rows.written).toBeLessThanOrEqual(6);
  });

  it("shows stale once a server stops reporting past its deadline, and not after its next report", async () => {
    const { fleet, s } = await realizedServer();
    await env.DB.prepare("UPDATE servers SET last_seen = ?1, stale_at = ?1 + 60000 WHERE id = ?2")
      .bind(Date.now() - 3_600_000, s.id)
      .run();
    const { runScheduled } = await import("../src/scheduled");
    const { createScheduledController } = await import("cloudflare:test");
    await runScheduled(createScheduledController({ scheduledTime: Date.now() }), env);
    expect(await listedStatus(fleet.id, s.id)).toBe("stale");
    expect((await call("GET", `/v1/servers?fleet=${fleet.id}&status=stale`)).json.items).toHaveLength(1);

    const stub = env.LEDGER.get(env.LEDGER.idFromName(s.id));
    await runInDurableObject(stub, (_i: ServerLedger, state) => {
      const mark = state.storage.kv.get<any>("projected");
      (_i as any).parts.store.setProjected({ ...mark, last_seen_written: Date.now() - INDEX_LEASE_MS });
    });
    await call("PUT", "/v1/agent/inventory", { token: s.token, body: report(2, agents) });
    expect((await indexRow(s.id))!.status).toBe("realized");
    expect(await listedStatus(fleet.id, s.id)).toBe("realized");
  });
});

describe("heartbeats of unchanged reports", () => {
  it("keep the report's content durable across eviction while only the heartbeat stays in memory", async () => {
    const { s } = await realizedServer();
    const stub = env.LEDGER.get(env.LEDGER.idFromName(s.id));
    const stored = () => runInDurableObject(stub, (_i: ServerLedger, state) => state.storage.kv.get<any>("report"));
    const first = await stored();
    await new Promise((r) => setTimeout(r, 5));
    await call("PUT", "/v1/agent/inventory", { token: s.token, body: report(2, agents) });
    // Identical content: storage keeps the earlier heartbeat, memory has the newer one.
    expect((await stored()).received_at).toBe(first.received_at);
    const live = await call("GET", `/v1/servers/${s.id}`);
    expect(Date.parse(live.json.last_seen)).toBeGreaterThan(first.received_at);

    const { evictDurableObject } = await import("cloudflare:test");
    await evictDurableObject(stub);
    const after = await call("GET", `/v1/servers/${s.id}`);
    expect(after.json).toMatchObject({ status: "realized", reported_generation: 2 });
    expect(Date.parse(after.json.last_seen)).toBe(first.received_at);

    // A report with new content is stored at once.
    await call("PUT", "/v1/agent/inventory", { token: s.token, body: report(2, agents, { boot_id: "boot-2" }) });
    expect((await stored()).boot_id).toBe("boot-2");
  });
});

describe("reports while D1 is down", () => {
  it("are acknowledged from the ledger alone, and the armed alarm brings the index up to date", async () => {
    const { s } = await realizedServer();
    const stub = env.LEDGER.get(env.LEDGER.idFromName(s.id));
    const restoreD1 = await breakD1(stub);
    const res = await call("PUT", "/v1/agent/inventory", {
      token: s.token,
      body: report(2, [agents[0]], { errors: [{ agent: "logs", op: "start", message: "crash loop" }] }),
    });
    expect(res.status).toBe(200);
    expect(res.json.status).toBe("failed");
    expect((await indexRow(s.id))!.status).toBe("realized");
    expect(await runInDurableObject(stub, (_i: ServerLedger, state) => state.storage.getAlarm())).not.toBeNull();

    await restoreD1();
    expect(await fireTimersNow(stub)).toBe(true);
    expect((await indexRow(s.id))!.status).toBe("failed");
  });
});

describe("D1 writes follow what changed", () => {
  it("writes only the instance rows (and server row) that differ, and deletes only removed agents", async () => {
    const fleet = await createFleet();
    const s = await registerServer(fleet.id);
    const many = ["a", "b", "c", "d", "e"].map((n) => ({ name: n, image: `${n}:1`, version: "1" }));
    await call("PUT", `/v1/servers/${s.id}/desired`, { body: { generation: 2, agents: many } });
    await call("PUT", "/v1/agent/inventory", { token: s.token, body: report(2, many) });
    const rowsOf = async () =>
      (await call("GET", `/v1/instances?server=${s.id}`)).json.items.map((i: any) => [
        i.agent,
        i.status,
        i.reported?.state ?? null,
      ]);
    expect(await rowsOf()).toEqual(many.map((a) => [a.name, "realized", "running"]));

    // One agent stops: the server row (now drifted) and that agent's row, nothing else.
    let before = await d1Statements();
    await call("PUT", "/v1/agent/inventory", {
      token: s.token,
      body: report(
        2,
        many.map((a) => (a.name === "c" ? { ...a, state: "stopped" } : a)),
      ),
    });
    expect((await d1Statements()).writes - before.writes).toBe(2);
    expect(await rowsOf()).toEqual(
      many.map((a) => [a.name, a.name === "c" ? "drifted" : "realized", a.name === "c" ? "stopped" : "running"]),
    );

    // A new generation drops two agents and the host confirms: only the removals are deleted.
    await call("PUT", `/v1/servers/${s.id}/desired`, { body: { generation: 3, agents: many.slice(0, 3) } });
    before = await d1Statements();
    await call("PUT", "/v1/agent/inventory", { token: s.token, body: report(3, many.slice(0, 3)) });
    const delta = (await d1Statements()).writes - before.writes;
    expect(delta).toBe(3); // server row, one DELETE for d and e, one upsert for c (running again)
    expect(await rowsOf()).toEqual(many.slice(0, 3).map((a) => [a.name, "realized", "running"]));
    expect((await indexRow(s.id))!).toMatchObject({
      status: "realized",
      desired_generation: 3,
      reported_generation: 3,
    });
  });
});

describe("a server back from silence", () => {
  it("has its stale index row rewritten by its first report back, when only an instance row's version moves", async () => {
    const { fleet, s } = await realizedServer();
    await env.DB.prepare("UPDATE servers SET last_seen = ?1, stale_at = ?1 + 60000 WHERE id = ?2")
      .bind(Date.now() - 3_600_000, s.id)
      .run();
    const { runScheduled } = await import("../src/scheduled");
    const { createScheduledController } = await import("cloudflare:test");
    await runScheduled(createScheduledController({ scheduledTime: Date.now() }), env);
    expect(await listedStatus(fleet.id, s.id)).toBe("stale");
    const stub = env.LEDGER.get(env.LEDGER.idFromName(s.id));
    await runInDurableObject(stub, (_i: ServerLedger, state) => {
      const mark = state.storage.kv.get<any>("projected");
      (_i as any).parts.store.setProjected({ ...mark, last_seen_written: Date.now() - INDEX_LEASE_MS });
    });
    // Same images; the reported version of one row moves, which is drifted (the version is compared too).
    const body = report(2, agents);
    body.agents[0].version = "1.0.1";
    await call("PUT", "/v1/agent/inventory", { token: s.token, body });
    const row = (await indexRow(s.id))!;
    expect(row.status).toBe("drifted");
    expect(await listedStatus(fleet.id, s.id)).toBe("drifted");
    expect(row.last_seen).toBeGreaterThan(Date.now() - 60_000);
    expect((await call("GET", `/v1/servers?fleet=${fleet.id}&status=stale`)).json.items).toEqual([]);
  });
});

describe("the statements of a changed report's projection", () => {
  it("update only the moved columns of rows written before: a few values bound, not the whole rows", () => {
    const record = {
      id: "srv-1",
      fleet_id: "f",
      hostname: "host-1.example",
      kind: "managed",
      roles: [],
      reboot_group: "default",
      fleetlock_id: null,
      state: "active",
      created_at: 1,
      stale_after_s: 120,
    } as unknown as ServerRecord;
    const desired = { generation: 2, agents } as unknown as DesiredState;
    const reportOf = (state: "running" | "stopped") =>
      ({
        ...report(
          2,
          agents.map((a, i) => ({ ...a, state: i === 0 ? state : "running" })),
        ),
        received_at: 1_000,
      }) as unknown as StoredReport;
    const before = buildProjection(record, desired, reportOf("running"), 1_000);
    const after = buildProjection(record, desired, reportOf("stopped"), 2_000);
    const { statements } = projectionStatements(getDb(env.DB), after, before.signatures);
    const built = statements.map((s) => (s as unknown as { toSQL(): { sql: string; params: unknown[] } }).toSQL());
    expect(built).toHaveLength(2);
    // The server row: its status and updated_at; the instance row: its state, status and updated_at.
    expect(built[0].sql).toMatch(/^update "servers" set/i);
    expect(built[0].params).toEqual(["drifted", 2_000, "srv-1"]);
    expect(built[1].sql).toMatch(/^update "agent_instances" set/i);
    expect(built[1].params).toEqual(["stopped", "drifted", 2_000, "srv-1", "compute"]);
  });
});
