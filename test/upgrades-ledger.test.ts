import { env, evictDurableObject, runInDurableObject } from "cloudflare:test";
import { eq } from "drizzle-orm";
import { describe, expect, it } from "vitest";
import { getDb } from "../src/db/client";
import { servers } from "../src/db/schema";
import type { ServerLedger } from "../src/ledger/durable-object";
import { buildProjection, projectionStatements } from "../src/ledger/projection";
import type { ServerRecord, DesiredState } from "../src/model/server/record";
import type { StoredReport } from "../src/model/server/schemas";
import { FORMAT_KEY, LEDGER_FORMAT, upgradeLedgerStorage } from "../src/ledger/storage-format";
import { ledgerOf } from "../src/objects/stubs";
import { call, createFleet, fireTimersNow, registerServer, report } from "./helpers";

const indexState = async (id: string) =>
  (await getDb(env.DB).select({ state: servers.state }).from(servers).where(eq(servers.id, id)))[0]?.state;

/**
 * A server as the foundation release left it: it reported, yet its ledger record (and so its
 * index row) still says provisioning, and the ledger carries no format stamp.
 */
async function foundationLedger() {
  const fleet = await createFleet();
  const server = await registerServer(fleet.id);
  const stub = ledgerOf(env, server.id);
  await runInDurableObject<ServerLedger, void>(stub, async (_instance, state) => {
    const kv = state.storage.kv;
    const record = kv.get<ServerRecord>("record")!;
    const desired = kv.get<DesiredState>("desired")!;
    const stored = { ...report(1, []), received_at: Date.now() } as StoredReport;
    kv.put("report", stored);
    kv.delete(FORMAT_KEY);
    // What the foundation's projection wrote for that report, in D1 and in the mark.
    const p = buildProjection({ ...record, state: "provisioning" }, desired, stored, Date.now());
    const db = getDb(env.DB);
    const { statements } = projectionStatements(db, p, null);
    await db.batch(statements as [any, ...any[]]);
    // The foundation's mark held one signature string for the whole projection.
    kv.put("projected", {
      signature: JSON.stringify(p.signatures),
      last_seen_written: stored.received_at,
      dirty: false,
      attempts: 0,
    });
  });
  await evictDurableObject(stub);
  return { server, stub };
}

describe("ledger storage format", () => {
  it("upgrades a ledger holding previous-format storage when it loads, and answers correctly", async () => {
    const { server, stub } = await foundationLedger();
    expect(await indexState(server.id)).toBe("provisioning");

    const view = await stub.view();

    expect(view!.record.state).toBe("active");
    expect(view!.computed.status).toBe("realized");
    expect(view!.desired.generation).toBe(1);
    await runInDurableObject<ServerLedger, void>(stub, (_i, state) => {
      expect(state.storage.kv.get(FORMAT_KEY)).toBe(LEDGER_FORMAT);
      expect(state.storage.kv.get<ServerRecord>("record")!.state).toBe("active");
    });
    // The host keeps working against the upgraded storage.
    const poll = await call("GET", "/v1/agent/desired", { token: server.token });
    expect(poll.status).toBe(200);
    expect(poll.json.generation).toBe(1);
    // The index follows through the projection the upgrade enqueued.
    expect(await fireTimersNow(stub)).toBe(true);
    expect(await indexState(server.id)).toBe("active");
    expect((await call("GET", `/v1/servers/${server.id}`)).json).toMatchObject({ state: "active", status: "realized" });
  });

  it("stamps a ledger written by current code without changing it or its index", async () => {
    const fleet = await createFleet();
    const server = await registerServer(fleet.id);
    const stub = ledgerOf(env, server.id);
    await evictDurableObject(stub);

    const view = await stub.view();

    expect(view!.record.state).toBe("provisioning");
    await runInDurableObject<ServerLedger, void>(stub, async (_i, state) => {
      expect(state.storage.kv.get(FORMAT_KEY)).toBe(LEDGER_FORMAT);
      expect(state.storage.sql.exec("SELECT * FROM _outbox").toArray()).toEqual([]);
    });
    expect(await indexState(server.id)).toBe("provisioning");
  });

  it("writes nothing into a ledger no server was registered in", async () => {
    const id = crypto.randomUUID();
    const stub = ledgerOf(env, id);
    expect(await stub.view()).toBeNull();
    // A host token naming a server that does not exist reaches that id's ledger too.
    const forged = `hms.${id}.${"A".repeat(43)}`;
    expect((await call("GET", "/v1/agent/desired", { token: forged })).status).toBe(401);
    await runInDurableObject<ServerLedger, void>(stub, (_i, state) => {
      expect([...state.storage.kv.list()]).toEqual([]);
      expect(state.storage.sql.exec("SELECT name FROM sqlite_master").toArray()).toEqual([]);
    });
  });

  it("continues a cleanup that a format-2 ledger left to its own cleanup timer, through the outbox, to removal", async () => {
    const fleet = await createFleet();
    const server = await registerServer(fleet.id);
    const A = { name: "a", image: "a:1", version: "1" };
    await call("PUT", `/v1/servers/${server.id}/desired`, { body: { generation: 2, agents: [A] } });
    await call("PUT", "/v1/agent/inventory", { token: server.token, body: report(2, [A]) });
    const stub = ledgerOf(env, server.id);
    // What the previous release stored when the host acknowledged: token gone, cleanup begun,
    // nothing done yet, and the rest left to a `cleanup` timer.
    await runInDurableObject<ServerLedger, void>(stub, (_i, state) => {
      const kv = state.storage.kv;
      const now = Date.now();
      kv.put("record", { ...kv.get<ServerRecord>("record")!, state: "decommissioning", token_hash: "" });
      kv.put("lifecycle", {
        order: "terminate",
        generation: 2,
        requested_at: now,
        requested_by: "token:bootstrap",
        previous_agents: [],
        previous_state: "active",
        cleanup_from: now,
        done: [],
      });
      kv.put(FORMAT_KEY, 2);
      state.storage.sql.exec("INSERT INTO _timers (name, due_at, payload) VALUES ('cleanup', ?, 'null')", now);
    });
    await evictDurableObject(stub);

    expect(await fireTimersNow(stub)).toBe(true);

    expect((await call("GET", `/v1/servers/${server.id}`)).json).toMatchObject({
      state: "removed",
      lifecycle: { cleanup_done: ["index", "coordinator"] },
    });
    expect(await indexState(server.id)).toBe("removed");
    expect(
      await env.DB.prepare("SELECT COUNT(*) AS n FROM agent_instances WHERE server_id = ?").bind(server.id).first("n"),
    ).toBe(0);
    expect(
      await env.DB.prepare("SELECT revoked_at FROM tokens WHERE id = ?").bind(server.id).first("revoked_at"),
    ).not.toBeNull();
    await runInDurableObject<ServerLedger, void>(stub, (_i, state) => {
      expect(state.storage.kv.get(FORMAT_KEY)).toBe(LEDGER_FORMAT);
      expect(state.storage.sql.exec("SELECT name FROM _timers WHERE name = 'cleanup'").toArray()).toEqual([]);
    });
  });

  it("refuses storage in a format newer than the code, leaving it as it is", async () => {
    const fleet = await createFleet();
    const server = await registerServer(fleet.id);
    await runInDurableObject<ServerLedger, void>(ledgerOf(env, server.id), (_i, state) => {
      state.storage.kv.put(FORMAT_KEY, LEDGER_FORMAT + 1);
      expect(() => upgradeLedgerStorage(state.storage)).toThrow(/newer than this code/);
      expect(state.storage.kv.get(FORMAT_KEY)).toBe(LEDGER_FORMAT + 1);
      // Put back, so the object can load again after this test.
      state.storage.kv.put(FORMAT_KEY, LEDGER_FORMAT);
    });
  });
});
