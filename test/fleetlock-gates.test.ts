/**
 * Health gates (docs/reboot-safety.md): each gate holds a new grant (a newcomer's, a parked host's) with its
 * own FleetLock kind, never takes a granted slot back, and lets the grant through once it opens.
 */
import { env, runInDurableObject } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import { getDb } from "../src/db/client";
import { rollouts } from "../src/db/schema";
import { eq } from "drizzle-orm";
import { call, fireTimersNow, report } from "./helpers";
import { LEFT_TIMER, QUIET_TIMER, quietGraceMs } from "../src/ledger/quiet";
import { openChannel } from "./channel-helpers";
import {
  fleetWithKey,
  parkInOrder,
  putGroup,
  registerClients,
  setClockOffset,
  view,
  zincati,
} from "./fleetlock-helpers";
import { coordinator } from "./support/objects";

/** Runs the coordinator's alarm as if its timers were due: the gates' inputs are read, queues drained. */
const readGates = (fleet: string) => fireTimersNow(coordinator(fleet));

/** Replaces the coordinator's outbound fetch for external checks. */
const answerChecksWith = (fleet: string, answer: (url: string) => Promise<Response>) =>
  runInDurableObject(coordinator(fleet), (instance) => {
    (instance as unknown as { parts: { gates: { fetcher: unknown } } }).parts.gates.fetcher = answer;
  });

const reportMessage = (id: string, body: unknown) => ({ type: "report", v: 1, id, report: body });

const failing = (id: string) => ({
  ...report(1, []),
  errors: [{ agent: "compute", op: "install", message: "image pull failed" }],
  boot_id: `b-${id}`,
});

/** Asks for a pre-reboot every 100 ms until it answers `status`; how long that took (ms), or null after `ms`. */
async function untilAnswered(baseUrl: string, id: string, status: number, since: number, ms = 5000) {
  for (;;) {
    const res = await zincati(baseUrl, "pre-reboot", id);
    if (res.status === status) return Date.now() - since <= ms ? { ms: Date.now() - since, res } : null;
    if (res.status === 200) await zincati(baseUrl, "steady-state", id);
    if (Date.now() - since > ms) return null;
    await new Promise((r) => setTimeout(r, 100));
  }
}

/** A fleet of three realized servers whose default group's fleet_health gate allows none unhealthy, and a first grant through it. */
async function healthyFleet() {
  const f = await fleetWithKey({ stale_after_s: 120 });
  await putGroup(f.fleet, "default", { slots: 3, gates: { fleet_health: { max_unhealthy: 0 } } });
  const servers = await registerClients(f.fleet, 3);
  for (const s of servers)
    expect(
      (await call("PUT", "/v1/agent/inventory", { token: s.token, body: report(1, [], { boot_id: `b-${s.id}` }) }))
        .status,
    ).toBe(200);
  // The first pre-reboot finds no copy of the fleet's health: it is read, and the host granted.
  let first = await zincati(f.baseUrl, "pre-reboot", servers[0].id);
  if (first.status !== 200) {
    await readGates(f.fleet);
    first = await zincati(f.baseUrl, "pre-reboot", servers[0].id);
  }
  expect(first.status).toBe(200);
  expect((await zincati(f.baseUrl, "steady-state", servers[0].id)).status).toBe(200);
  return { f, servers };
}

describe("fleet-health gates on pushed facts", () => {
  it("refuse the next pre-reboot within 5 s of a failing report, and grant again within 5 s of the realizing one", async () => {
    const {
      f,
      servers: [, b, c],
    } = await healthyFleet();
    const failedAt = Date.now();
    expect((await call("PUT", "/v1/agent/inventory", { token: b.token, body: failing(b.id) })).status).toBe(200);
    const closed = await untilAnswered(f.baseUrl, c.id, 409, failedAt);
    expect(closed, "the gate did not close within 5 s of the failing report").not.toBeNull();
    expect(closed!.res.json).toMatchObject({
      kind: "fleet_unhealthy",
      value: expect.stringMatching(/1 of 3 server\(s\) failed/),
    });
    console.log(`fleet-health gate closed ${closed!.ms} ms after the failing report`);
    expect((await view(f.fleet)).gates).toMatchObject([{ gate: "fleet_health", open: false }]);

    const fixedAt = Date.now();
    expect(
      (await call("PUT", "/v1/agent/inventory", { token: b.token, body: report(1, [], { boot_id: `b-${b.id}` }) }))
        .status,
    ).toBe(200);
    const open = await untilAnswered(f.baseUrl, c.id, 200, fixedAt);
    expect(open, "the gate did not open within 5 s of the realizing report").not.toBeNull();
    console.log(`fleet-health gate opened ${open!.ms} ms after the realizing report`);
  });

  it("refuse the next pre-reboot once the quiet watch finds a server silent, and grant again when it reports", async () => {
    const {
      f,
      servers: [, b, c],
    } = await healthyFleet();
    const ledger = env.LEDGER.get(env.LEDGER.idFromName(b.serverId));
    // As if b had said nothing since stale_after and the watch's grace: its timer is due.
    await runInDurableObject(ledger, async (instance, state) => {
      const store = (instance as unknown as { parts: { store: { load(): any; save(p: unknown): void } } }).parts.store;
      const { report: stored } = store.load();
      store.save({ report: { ...stored, received_at: Date.now() - 120_000 - quietGraceMs(120) - 1_000 } });
      state.storage.sql.exec("UPDATE _timers SET due_at = ? WHERE name = ?", Date.now() - 1, QUIET_TIMER);
    });
    const quietAt = Date.now();
    await fireTimersNow(ledger);
    const closed = await untilAnswered(f.baseUrl, c.id, 409, quietAt);
    expect(closed, "the gate did not close within 5 s of the quiet watch").not.toBeNull();
    expect(closed!.res.json.value).toMatch(/1 stale/);
    console.log(`fleet-health gate closed ${closed!.ms} ms after the quiet watch fired`);

    const backAt = Date.now();
    expect(
      (await call("PUT", "/v1/agent/inventory", { token: b.token, body: report(1, [], { boot_id: `b-${b.id}` }) }))
        .status,
    ).toBe(200);
    const open = await untilAnswered(f.baseUrl, c.id, 200, backAt);
    expect(open, "the gate did not open within 5 s of the report after the silence").not.toBeNull();
    console.log(`fleet-health gate opened ${open!.ms} ms after the host reported again`);
  });

  it("refuse the next pre-reboot once a host that left the channel turns stale, and grant again when it is back", async () => {
    const {
      f,
      servers: [, b, c],
    } = await healthyFleet();
    const ledger = env.LEDGER.get(env.LEDGER.idFromName(b.serverId));
    const ch = await openChannel(b.token, { generation: 1 });
    ch.send(reportMessage("r-1", report(1, [], { boot_id: `b-${b.id}` })));
    expect((await ch.next("ack")).status).toBe(200);
    ch.close();
    await expect
      .poll(
        () =>
          runInDurableObject(
            ledger,
            (_i, state) =>
              state.storage.sql.exec("SELECT COUNT(*) AS n FROM _timers WHERE name = ?", LEFT_TIMER).one().n,
          ),
        { timeout: 3000 },
      )
      .toBe(1);
    // As if stale_after had passed since it left: its heartbeat is that old, the left timer due.
    await runInDurableObject(ledger, async (instance, state) => {
      const store = (instance as unknown as { parts: { store: { load(): any; save(p: unknown): void } } }).parts.store;
      const { report: stored } = store.load();
      store.save({ report: { ...stored, received_at: Date.now() - 121_000 } });
      state.storage.sql.exec("UPDATE _timers SET due_at = ? WHERE name = ?", Date.now() - 1, LEFT_TIMER);
    });
    // The index row's stale_at, exact since the host left, is then in the past too.
    await env.DB.prepare("UPDATE servers SET stale_at = ? WHERE id = ?")
      .bind(Date.now() - 1_000, b.serverId)
      .run();
    const staleAt = Date.now();
    await fireTimersNow(ledger);
    const closed = await untilAnswered(f.baseUrl, c.id, 409, staleAt);
    expect(closed, "the gate did not close within 5 s of the host turning stale").not.toBeNull();
    expect(closed!.res.json.value).toMatch(/1 stale/);
    console.log(`fleet-health gate closed ${closed!.ms} ms after the channel host turned stale`);

    const backAt = Date.now();
    const again = await openChannel(b.token, { generation: 1 });
    again.send(reportMessage("r-2", report(1, [], { boot_id: `b-${b.id}` })));
    expect((await again.next("ack")).status).toBe(200);
    const open = await untilAnswered(f.baseUrl, c.id, 200, backAt);
    expect(open, "the gate did not open within 5 s of the host's return").not.toBeNull();
    console.log(`fleet-health gate opened ${open!.ms} ms after the channel host came back`);
    again.close();
  });

  it("wait for a fresh read once the copy is past its bound, rather than answer from it", async () => {
    const {
      f,
      servers: [, b, c],
    } = await healthyFleet();
    // The index says b failed, with no push (as a change no owner tells would): only a read sees it.
    await env.DB.prepare("UPDATE servers SET status = 'failed' WHERE id = ?").bind(b.serverId).run();
    expect((await zincati(f.baseUrl, "pre-reboot", c.id)).status).toBe(200);
    await zincati(f.baseUrl, "steady-state", c.id);
    // The copy ages past its bound: the next pre-reboot is answered from a fresh read.
    await runInDurableObject(coordinator(f.fleet), (instance) => {
      const gs = (instance as unknown as { parts: { gateStore: { inputs(): any; saveInputs(i: unknown): void } } })
        .parts.gateStore;
      const i = gs.inputs();
      gs.saveInputs({ ...i, health: { ...i.health, at: Date.now() - 61_000 } });
    });
    const t0 = Date.now();
    const res = await zincati(f.baseUrl, "pre-reboot", c.id);
    expect(res.status).toBe(409);
    expect(res.json.kind).toBe("fleet_unhealthy");
    // Answered once the read was in, not at the end of the wait for it.
    expect(Date.now() - t0).toBeLessThan(5000);
  });
});

describe("health gates", () => {
  it("an operator's hold refuses newcomers with operator_hold and its reason, keeps parked hosts waiting, and lets them through when lifted", async () => {
    const f = await fleetWithKey();
    await putGroup(f.fleet, "default", { slots: 2, queue_wait_s: 30 });
    const [a, b, c] = await registerClients(f.fleet, 3);
    expect((await zincati(f.baseUrl, "pre-reboot", a.id)).status).toBe(200);
    const held = await call("PUT", `/v1/fleets/${f.fleet}/reboot-groups/default/hold`, {
      body: { reason: "datacenter maintenance" },
    });
    expect(held.status).toBe(200);
    expect(held.json.hold).toMatchObject({ reason: "datacenter maintenance", until: null });
    await putGroup(f.fleet, "default", { slots: 2, queue_wait_s: 0 });
    const refused = await zincati(f.baseUrl, "pre-reboot", b.id);
    expect(refused.status).toBe(409);
    expect(refused.json.kind).toBe("operator_hold");
    expect(refused.json.value).toMatch(/datacenter maintenance/);
    // The holder keeps its slot (gates never revoke) and its recursive lock.
    expect((await zincati(f.baseUrl, "pre-reboot", a.id)).status).toBe(200);
    const g = await view(f.fleet);
    expect(g.gates).toEqual([
      { gate: "hold", open: false, kind: "operator_hold", reason: expect.stringMatching(/datacenter maintenance/) },
    ]);

    await putGroup(f.fleet, "default", { slots: 2, queue_wait_s: 30 });
    const [pb] = await parkInOrder(f, [b.id]);
    const del = await call("DELETE", `/v1/fleets/${f.fleet}/reboot-groups/default/hold`);
    expect(del.json).toEqual({ hold: null });
    expect((await pb).status).toBe(200);
    await putGroup(f.fleet, "default", { slots: 2, queue_wait_s: 0 });
    expect((await zincati(f.baseUrl, "pre-reboot", c.id)).json.kind).toBe("semaphore_full");
    const audit = await call("GET", `/v1/audit?target=fleet:${f.fleet}&limit=100`);
    const actions = audit.json.items.map((e: { action: string }) => e.action);
    expect(actions).toEqual(
      expect.arrayContaining(["reboot.hold", "reboot.unhold", "reboot_group.gate_closed", "reboot_group.gate_opened"]),
    );
  });

  it("a fleet-wide hold with an expiry holds every group and lifts by itself, granting the parked host", async () => {
    const f = await fleetWithKey();
    await putGroup(f.fleet, "default", { slots: 1, queue_wait_s: 300 });
    const [a] = await registerClients(f.fleet, 1);
    const res = await call("PUT", `/v1/fleets/${f.fleet}/hold`, { body: { reason: "change freeze", for_s: 120 } });
    expect(res.status).toBe(200);
    const [pa] = await parkInOrder(f, [a.id]);
    expect((await view(f.fleet)).holders).toEqual([]);
    await setClockOffset(f.fleet, 119_000);
    await readGates(f.fleet);
    expect((await view(f.fleet)).holders).toEqual([]);
    await setClockOffset(f.fleet, 121_000);
    await readGates(f.fleet);
    expect((await pa).status).toBe(200);
  });

  it("fleet health: holds grants while failed + stale servers exceed the count, and grants the parked host once the server is fixed", async () => {
    const f = await fleetWithKey();
    await putGroup(f.fleet, "default", { slots: 1, queue_wait_s: 30 });
    const [a, b] = await registerClients(f.fleet, 2);
    expect((await call("PUT", "/v1/agent/inventory", { token: b.token, body: failing(b.id) })).status).toBe(200);
    const put = await call("PUT", `/v1/fleets/${f.fleet}/gates`, { body: { fleet_health: { max_unhealthy: 0 } } });
    expect(put.status).toBe(200);
    const [pa] = await parkInOrder(f, [a.id]);
    await readGates(f.fleet);
    let g = await view(f.fleet);
    expect(g.holders).toEqual([]);
    expect(g.gates).toMatchObject([{ gate: "fleet_health", open: false, kind: "fleet_unhealthy" }]);
    expect(g.gates_source).toBe("fleet");
    const gates = await call("GET", `/v1/fleets/${f.fleet}/gates`);
    expect(gates.json.inputs.health).toMatchObject({ failed: 1, total: 2 });

    // b is fixed: its next report is realized. The next read opens the gate.
    expect(
      (await call("PUT", "/v1/agent/inventory", { token: b.token, body: report(1, [], { boot_id: `b-${b.id}` }) }))
        .status,
    ).toBe(200);
    await readGates(f.fleet);
    expect((await pa).status).toBe(200);
    g = await view(f.fleet);
    expect(g.gates).toMatchObject([{ gate: "fleet_health", open: true }]);
  });

  it("fleet health by share: a newcomer without a queue is told fleet_unhealthy with the counts", async () => {
    const f = await fleetWithKey();
    await putGroup(f.fleet, "default", { slots: 1, gates: { fleet_health: { max_unhealthy_percent: 40 } } });
    const [a, b] = await registerClients(f.fleet, 2);
    await call("PUT", "/v1/agent/inventory", { token: b.token, body: failing(b.id) });
    await readGates(f.fleet);
    const res = await zincati(f.baseUrl, "pre-reboot", a.id);
    expect(res.status).toBe(409);
    expect(res.json.kind).toBe("fleet_unhealthy");
    expect(res.json.value).toMatch(/1 of 2 server\(s\) failed or stale.*50\.0 %.*over 40 %/);
    // A group's own gates replace the fleet's default; {} means none.
    await putGroup(f.fleet, "default", { slots: 1, gates: {} });
    expect((await zincati(f.baseUrl, "pre-reboot", a.id)).status).toBe(200);
  });

  it("a running rollout holds grants while it runs; the parked host is granted once it ended", async () => {
    const f = await fleetWithKey();
    await putGroup(f.fleet, "default", { slots: 1, queue_wait_s: 30, gates: { rollouts: true } });
    const [a] = await registerClients(f.fleet, 1);
    const id = crypto.randomUUID();
    const now = Date.now();
    await getDb(env.DB).insert(rollouts).values({
      id,
      fleetId: f.fleet,
      agent: "compute",
      image: "compute:2",
      version: "2",
      state: "running",
      pass: 1,
      counts: {},
      createdBy: "test",
      createdAt: now,
      updatedAt: now,
    });
    const [pa] = await parkInOrder(f, [a.id]);
    await readGates(f.fleet);
    expect((await view(f.fleet)).gates).toMatchObject([{ gate: "rollouts", open: false, kind: "rollout_running" }]);
    await getDb(env.DB).update(rollouts).set({ state: "succeeded" }).where(eq(rollouts.id, id));
    await readGates(f.fleet);
    expect((await pa).status).toBe(200);
  });

  it("an external check: 2xx opens, anything else holds with external_check_failed; unreachable is closed unless fail_open", async () => {
    const f = await fleetWithKey();
    const url = "https://alerts.example.com/ok-to-reboot";
    await putGroup(f.fleet, "default", { slots: 1, queue_wait_s: 30, gates: { external: { url, cache_s: 5 } } });
    const [a, b] = await registerClients(f.fleet, 2);
    let status = 503;
    const asked: string[] = [];
    await answerChecksWith(f.fleet, async (u) => {
      asked.push(u);
      return new Response("alerts firing", { status });
    });
    const [pa] = await parkInOrder(f, [a.id]);
    await readGates(f.fleet);
    let g = await view(f.fleet);
    expect(g.gates).toMatchObject([
      { gate: "external", open: false, kind: "external_check_failed", reason: `${url} answered HTTP 503` },
    ]);
    status = 200;
    await setClockOffset(f.fleet, 0);
    await readGates(f.fleet);
    // The answer is cached for cache_s: asked again only once that passed.
    expect(asked.length).toBeGreaterThanOrEqual(1);
    await new Promise((r) => setTimeout(r, 5_100));
    await readGates(f.fleet);
    expect((await pa).status).toBe(200);
    expect(asked.length).toBeGreaterThanOrEqual(2);
    await zincati(f.baseUrl, "steady-state", a.id);

    // Unreachable: closed by default, open when told to fail open.
    await answerChecksWith(f.fleet, async () => {
      throw new Error("connection refused");
    });
    await putGroup(f.fleet, "default", {
      slots: 1,
      queue_wait_s: 0,
      gates: { external: { url: `${url}?v=2`, cache_s: 5 } },
    });
    await readGates(f.fleet);
    const closed = await zincati(f.baseUrl, "pre-reboot", b.id);
    expect(closed.json.kind).toBe("external_check_failed");
    expect(closed.json.value).toMatch(/could not be checked: connection refused/);
    await putGroup(f.fleet, "default", {
      slots: 1,
      gates: { external: { url: `${url}?v=2`, cache_s: 5, fail_open: true } },
    });
    g = await view(f.fleet);
    expect(g.gates).toMatchObject([{ gate: "external", open: true }]);
    expect((await zincati(f.baseUrl, "pre-reboot", b.id)).status).toBe(200);
  });

  it("refuses an external check that is not HTTPS, and a hold that ends in the past, changing nothing", async () => {
    const f = await fleetWithKey();
    await putGroup(f.fleet, "default", { slots: 1 });
    const bad = await call("PUT", `/v1/fleets/${f.fleet}/gates`, {
      body: { external: { url: "http://alerts.example.com/ok" } },
    });
    expect(bad.status).toBe(400);
    expect(bad.json.error.code).toBe("validation_failed");
    expect(bad.json.error.message).toMatch(/must be https/);
    const unknown = await call("PUT", `/v1/fleets/${f.fleet}/gates`, { body: { fleet_health: {} } });
    expect(unknown.status).toBe(400);
    const past = await call("PUT", `/v1/fleets/${f.fleet}/hold`, {
      body: { reason: "x", until: "2001-01-01T00:00:00Z" },
    });
    expect(past.status).toBe(400);
    const gates = await call("GET", `/v1/fleets/${f.fleet}/gates`);
    expect(gates.json).toMatchObject({ default: null, hold: null });
  });
});
