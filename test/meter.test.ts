import {
  createExecutionContext as ctx,
  createScheduledController,
  waitOnExecutionContext,
  env,
  runDurableObjectAlarm,
  runInDurableObject,
  SELF,
} from "cloudflare:test";
import { eq } from "drizzle-orm";
import { describe, expect, it } from "vitest";
import { getDb } from "../src/db/client";
import { fleets } from "../src/db/schema";
import * as deployed from "../src/index";
import { ServerLedger as Ledger } from "../src/ledger/durable-object";
import { d1Counters, d1RowsInto, type D1Rows } from "../src/local/d1-taps";
import * as local from "../src/local/index";
import { metered, meterReading, resetMeter } from "../src/local/meter";
import { meterStorage } from "../src/local/storage-meter";
import { LEASE_REFRESH_ROWS } from "../scripts/bench/lease-refresh";
import { INDEX_LEASE_MS } from "../src/ledger/projection";
import { emptyReporter, openChannel } from "./channel-helpers";
import { BASE, call, createFleet, fireTimersNow, registerServer, report, send, settle, uniq } from "./helpers";
import { fleetWithKey, putGroup, registerClients, zincati } from "./fleetlock-helpers";
import { coordinator, ledger, sleep, sleep as pause } from "./support/objects";

/** Waits (at most 20 s) until an object's outbox is empty, no call of it is under way and no alarm is set. */
async function quiesce(stub: DurableObjectStub) {
  const deadline = Date.now() + 20_000;
  for (;;) {
    await pause(100);
    while (await runDurableObjectAlarm(stub));
    const owed = await runInDurableObject(stub, async (instance, state) => {
      await (instance as unknown as { parts: { outbox: { idle(): Promise<void> } } }).parts.outbox.idle();
      const rows = state.storage.sql.exec("SELECT 1 FROM sqlite_master WHERE name = '_outbox'").toArray().length
        ? state.storage.sql.exec<{ n: number }>("SELECT COUNT(*) AS n FROM _outbox").one().n
        : 0;
      return rows + ((await state.storage.getAlarm()) === null ? 0 : 1);
    });
    if (owed === 0) return;
    if (Date.now() > deadline) throw new Error(`the object still owes ${owed} effect(s) or an alarm after 20 s`);
  }
}

/** A stand-in object: the meter needs only the constructor's (ctx, env) and ctx.id / ctx.waitUntil. */
class Probe {
  waited: Promise<unknown>[] = [];
  constructor(
    readonly ctx: { id: { toString(): string }; waitUntil(p: Promise<unknown>): void },
    readonly env: unknown,
  ) {}
  async work(ms: number) {
    await sleep(ms);
    return this.helper();
  }
  helper() {
    return "done";
  }
  answerAfterward(ms: number) {
    this.ctx.waitUntil(sleep(ms));
    return "answered";
  }
  webSocketMessage() {}
  alarm() {}
}
const MeteredProbe = metered(Probe as never, "Probe") as unknown as typeof Probe;

function probe() {
  const id = uniq("probe");
  const waits: Promise<unknown>[] = [];
  const instance = new MeteredProbe({ id: { toString: () => id }, waitUntil: (p) => void waits.push(p) }, {});
  return { id, instance, waits };
}

const probeReading = (id: string) =>
  (meterReading().objects.Probe as { by_instance: Record<string, any> } | undefined)?.by_instance[id];

describe("cost meter", () => {
  it("counts a call from outside as one request and keeps the object awake until it settles; the object's calls to itself do not count", async () => {
    const { id, instance } = probe();
    const running = instance.work(40);
    expect(probeReading(id)).toMatchObject({ in_flight: 1, rpc: 1 });
    expect(await running).toBe("done");
    const r = probeReading(id);
    expect(r).toMatchObject({ requests: 1, rpc: 1, in_flight: 0, starts: 1 });
    expect(r.awake_ms).toBeGreaterThanOrEqual(35);
    expect(Object.keys((meterReading().objects.Probe as { methods: object }).methods)).not.toContain("helper");
  });

  it("keeps the object awake while work given to waitUntil runs after the answer", async () => {
    const { id, instance, waits } = probe();
    expect(instance.answerAfterward(50)).toBe("answered");
    expect(probeReading(id)).toMatchObject({ in_flight: 0, waiting_until: 1 });
    await Promise.all(waits);
    const r = probeReading(id);
    expect(r.waiting_until).toBe(0);
    expect(r.awake_ms).toBeGreaterThanOrEqual(45);
  });

  it("bills alarms as requests and incoming WebSocket messages at 20 to a request", async () => {
    const { id, instance } = probe();
    instance.alarm();
    for (let i = 0; i < 20; i++) instance.webSocketMessage();
    expect(probeReading(id)).toMatchObject({ alarm: 1, ws_messages: 20, rpc: 0, requests: 2 });
  });

  it("stays out of the deployed entry: its objects are the classes themselves and it has no local routes", async () => {
    expect(deployed.ServerLedger).toBe(Ledger);
    expect(local.ServerLedger).not.toBe(Ledger);
    const res = await deployed.default.fetch(new Request(`${BASE}/__local/meter`), env, {
      waitUntil() {},
      passThroughOnException() {},
      props: {},
    } as never);
    expect(res.status).toBe(404);
  });

  it("counts D1 rows read and written from each statement's meta, by sender, through raw() and batch() too", async () => {
    const rows: D1Rows = { statements: 0, rowsRead: 0, rowsWritten: 0 };
    const db = getDb(d1RowsInto(env.DB, rows));
    const [a, b] = [uniq("rows"), uniq("rows")];
    const fleet = (id: string) => ({ id, capabilities: {}, staleAfterS: 300, lockTtlS: 600, createdAt: Date.now() });

    // The same statements sent without the meter, for their meta.
    const direct = env.DB;
    const insert = await getDb(direct).insert(fleets).values(fleet(a)).run();
    expect(insert.meta.rows_written).toBeGreaterThan(0);
    await db.insert(fleets).values(fleet(b)).run();
    expect(rows).toEqual({ statements: 1, rowsRead: insert.meta.rows_read, rowsWritten: insert.meta.rows_written });

    const select = await direct.prepare("SELECT id FROM fleets").all();
    expect(select.meta.rows_read).toBeGreaterThan(1);
    // drizzle reads through raw(), whose answer carries no meta.
    await d1RowsInto(env.DB, rows).prepare("SELECT id FROM fleets").raw();
    expect(rows.rowsRead).toBe(insert.meta.rows_read + select.meta.rows_read);
    await db.batch([
      db.select().from(fleets).where(eq(fleets.id, a)),
      db.select().from(fleets).where(eq(fleets.id, b)),
    ]);
    expect(rows.statements).toBe(4);
    expect(rows.rowsRead).toBeGreaterThan(insert.meta.rows_read + select.meta.rows_read);
  });

  it("attributes the Worker's and each object's D1 rows to them", async () => {
    const fleet = await createFleet();
    resetMeter();
    const s = await registerServer(fleet.id);
    const reading = meterReading();
    expect(reading.d1_rows_metered).toBe(true);
    expect(reading.worker.d1.rows_read).toBeGreaterThan(0);
    const ledger = (reading.objects.ServerLedger as { by_instance: Record<string, any> }).by_instance[
      env.LEDGER.idFromName(s.id).toString()
    ];
    expect(ledger.d1.rows_written).toBeGreaterThan(0);
  });

  it("counts the cron's D1 rows apart from the Worker's requests', for a bill that pays them once per deployment", async () => {
    const tick = async () => {
      const c = ctx();
      await local.default.scheduled!(createScheduledController({ scheduledTime: Date.now() }), env, c);
      await waitOnExecutionContext(c);
    };
    const fleet = await createFleet();
    await registerServer(fleet.id);
    // Audit rows owed as audit.recorded: the tick below hands them on, moving its cursor.
    await tick();
    await registerServer(fleet.id);
    resetMeter();
    const running = tick();
    // The run's work goes on after its handler returns (waitUntil): the meter says so.
    expect(meterReading().worker.cron_pending).toBeGreaterThan(0);
    await running;
    const reading = meterReading();
    expect(reading.worker.cron_pending).toBe(0);
    expect(reading.worker.scheduled).toBe(1);
    expect(reading.worker.cron_d1.rows_read).toBeGreaterThan(0);
    expect(reading.worker.cron_d1.rows_written).toBeGreaterThan(0);
    expect(reading.worker.d1).toEqual({ statements: 0, rows_read: 0, rows_written: 0 });
    // A request's rows are the Worker's, and leave the cron's as they were.
    await registerServer(fleet.id);
    expect(meterReading().worker.d1.rows_read).toBeGreaterThan(0);
    expect(meterReading().worker.cron_d1).toEqual(reading.worker.cron_d1);
  });

  it("counts an object's own storage rows: a ledger's first report writes some, an unchanged one soon after none", async () => {
    const fleet = await createFleet();
    const s = await registerServer(fleet.id);
    const id = env.LEDGER.idFromName(s.id).toString();
    const storageOf = () =>
      (meterReading().objects.ServerLedger as { by_instance: Record<string, any> }).by_instance[id]?.storage;
    resetMeter();
    expect((await call("PUT", "/v1/agent/inventory", { token: s.token, body: report(1, []) })).status).toBe(200);
    await settle(s.id);
    expect(storageOf().rows_written).toBeGreaterThan(0);
    // The first report's console notice waits out its rate window (src/notices/notices.ts) in the
    // outbox: delivered before the window that measures the unchanged report.
    await sleep(600);
    await fireTimersNow(env.LEDGER.get(env.LEDGER.idFromName(s.id)));
    resetMeter();
    const same = report(1, []);
    expect((await call("PUT", "/v1/agent/inventory", { token: s.token, body: same })).status).toBe(200);
    expect(storageOf()).toMatchObject({ rows_written: 0 });
    // A warm ledger's heartbeat touches its storage not at all: no row read, none written, no alarm
    // set (the floor it is judged against writes one row). Sent without `call`, whose settling
    // flush of the outbox would read a row of its own.
    resetMeter();
    const res = await send(`${BASE}/v1/agent/inventory`, {
      method: "PUT",
      headers: { Authorization: `Bearer ${s.token}`, "Content-Type": "application/json" },
      body: JSON.stringify(same),
    });
    expect(res.status).toBe(200);
    expect(storageOf()).toMatchObject({ rows_read: 0, rows_written: 0, alarms_set: 0 });
  });

  it("writes 9 to 13 of a ledger's storage rows and 2 D1 statements for a changed report: its own, its effects' one or two each and their deletes, a timer and alarm only after a quiet spell", async () => {
    const fleet = await createFleet();
    const s = await registerServer(fleet.id);
    const stub = ledger(s.id);
    const agents = ["compute", "vm", "logs"].map((name) => ({
      name,
      image: `registry.example/${name}:1.0`,
      version: "1.0",
    }));
    expect((await call("PUT", `/v1/servers/${s.id}/desired`, { body: { generation: 2, agents } })).status).toBe(200);
    // One of three agents stopped, then running again: each report changes what the index shows,
    // and turns the server drifted or realized, which the fleet's coordinator hears of.
    const changed = (i: number) =>
      report(
        2,
        agents.map((a, j) => ({ ...a, state: j === 0 && i % 2 === 1 ? "stopped" : "running" })),
        {
          reconciled_at: "2026-11-21T00:00:00Z",
        },
      );
    expect((await call("PUT", "/v1/agent/inventory", { token: s.token, body: changed(0) })).status).toBe(200);
    await settle(s.id);
    // Past the console notice's rate window (src/notices/notices.ts), each time: its notice goes
    // at once rather than waiting in the outbox, as it mostly does at the bench's rate.
    await pause(600);
    await fireTimersNow(stub);
    await pause(600);
    const rowsWritten = async (i: number) => {
      resetMeter();
      const res = await call("PUT", "/v1/agent/inventory", { token: s.token, body: changed(i) });
      expect(res.status).toBe(200);
      await settle(s.id);
      const reading = (meterReading().objects.ServerLedger as { by_instance: Record<string, any> }).by_instance[
        stub.id.toString()
      ];
      await pause(600);
      statements.push(reading.d1.statements);
      return reading.storage.rows_written;
    };
    const statements: number[] = [];
    // Drifted: the report 1; the projection's effect 2 (its row and its key) and the health event's
    // 1; after D1 took the projection its mark 1 and the console notice 2 (its row and its key);
    // the three rows deleted 3; the outbox timer 1 and the alarm 1, both set anew after the alarm
    // fired; and the timer moved once more by a flush that ends while another flush's call is
    // still under way (it keeps the timer at that call's deadline: src/objects/kit/outbox.ts, nextDue).
    expect(await rowsWritten(1)).toBe(13);
    // Realized again: the coordinator already knows this boot realized, so no health event (3 fewer
    // rows); the timer left by the report before is no later than this one's effects are due, so
    // no new timer row and no alarm (2 fewer).
    expect(await rowsWritten(2)).toBe(9);
    expect(await rowsWritten(3)).toBe(11);
    expect(await rowsWritten(4)).toBe(9);
    // D1: the server row (its status) and the instance row that moved, one batch; a drifting
    // report's read of the fleet's watch rides on the server row's write (RETURNING), not as a
    // third statement.
    expect(statements).toEqual([2, 2, 2, 2]);
  });

  it("counts each setAlarm as a storage row written: the quiet watch re-arming when its timer finds a newer report", async () => {
    const fleet = await createFleet({ stale_after_s: 120 });
    const s = await registerServer(fleet.id);
    const stub = env.LEDGER.get(env.LEDGER.idFromName(s.id));
    expect((await call("PUT", "/v1/agent/inventory", { token: s.token, body: report(1, []) })).status).toBe(200);
    await settle(s.id);
    // The watch's timer made due now (the host reported since it was set): firing it re-arms it.
    await runInDurableObject(stub, async (_i, state) => {
      state.storage.sql.exec("UPDATE _timers SET due_at = ? WHERE name = 'quiet'", Date.now() - 1);
      await state.storage.setAlarm(Date.now() - 1);
    });
    resetMeter();
    await runDurableObjectAlarm(stub);
    const storage = (meterReading().objects.ServerLedger as { by_instance: Record<string, any> }).by_instance[
      stub.id.toString()
    ].storage;
    expect(storage.alarms_set).toBe(1);
    expect(storage.rows_written).toBeGreaterThanOrEqual(1);
    expect(storage.stored_bytes).toBeGreaterThan(0);
  });

  it("measures a connected host's lease refresh at what the cost benchmark adds once a lease, and a report within the lease at no row written", async () => {
    const fleet = await createFleet({ stale_after_s: 300 });
    const s = await registerServer(fleet.id);
    const ch = await openChannel(s.token, { generation: 1 });
    const send = emptyReporter(ch, s.id);
    await send("first");
    // The first report's console notice leaves the outbox after its rate window, and on a loaded
    // machine its delivery may still be under way when the window ends: wait until the ledger owes
    // nothing and has no alarm, so the report below is measured alone.
    await quiesce(ledger(s.id));
    const reading = () =>
      (meterReading().objects.ServerLedger as { by_instance: Record<string, any> }).by_instance[
        ledger(s.id).id.toString()
      ];
    resetMeter();
    await send("within the lease");
    const steady = reading();
    expect(steady.d1.rows_written + steady.storage.rows_written).toBe(0);
    await runInDurableObject(ledger(s.id), (_i, state) => {
      const mark = state.storage.kv.get<any>("projected");
      (_i as any).parts.store.setProjected({ ...mark, last_seen_written: mark.last_seen_written - INDEX_LEASE_MS });
    });
    await pause(5);
    resetMeter();
    await send("past the lease");
    const refresh = reading();
    expect({
      d1RowsWritten: refresh.d1.rows_written,
      d1RowsRead: refresh.d1.rows_read,
      doRowsWritten: refresh.storage.rows_written,
      doRowsRead: refresh.storage.rows_read - steady.storage.rows_read,
    }).toEqual(LEASE_REFRESH_ROWS);
    expect(await runInDurableObject(ledger(s.id), (_i, state) => state.storage.getAlarm())).toBeNull();
    ch.close();
  });

  it("reads at most 8 of a ledger's storage rows for a connected host's report that wakes it", async () => {
    const fleet = await createFleet({ stale_after_s: 300 });
    const s = await registerServer(fleet.id);
    const ch = await openChannel(s.token, { generation: 1 });
    const send = emptyReporter(ch, s.id);
    await send("first");
    await pause(700);
    await send("second");
    const read = await runInDurableObject(ledger(s.id), async (_i, state) => {
      // Counted as the meter counts them (src/local/storage-meter.ts), on a ledger woken anew: on
      // the channel each report a minute apart wakes it from hibernation.
      const counted = { rowsRead: 0, rowsWritten: 0, alarmsSet: 0, storedBytes: 0, byStatement: new Map() };
      const settleRows = meterStorage(state.storage, counted);
      const woken = new Ledger(state, env as never);
      // Its opening runs under blockConcurrencyWhile, after this turn.
      await pause(20);
      const ws = state.getWebSockets("host")[0];
      await woken.webSocketMessage(ws, JSON.stringify({ type: "report", v: 1, id: "third", report: report(1, []) }));
      settleRows();
      return counted;
    });
    expect(read.rowsRead).toBeLessThanOrEqual(8);
    expect(read.rowsWritten).toBe(0);
    ch.close();
  });

  it("counts console lines by kind and the Worker's writes, for Workers Logs", async () => {
    resetMeter();
    await createFleet();
    await SELF.fetch(`${BASE}/healthz`);
    console.log(JSON.stringify({ level: "info", msg: "request", note: "an access line" }));
    console.warn("a warning");
    const reading = meterReading();
    expect(reading.worker).toMatchObject({ requests: 2, write_requests: 1 });
    expect(reading.logs.lines).toBeGreaterThanOrEqual(2);
    expect(reading.logs.access_lines).toBeGreaterThanOrEqual(1);
    expect(reading.logs.lines - reading.logs.access_lines).toBeGreaterThanOrEqual(1);
    expect(reading.d1_stored_bytes).toBeGreaterThan(0);
  });

  it("counts the statements the Worker and the objects send, by kind, at /__local/d1-statements", async () => {
    const before = { ...d1Counters };
    await createFleet();
    const served = (await (await SELF.fetch(`${BASE}/__local/d1-statements`)).json()) as {
      reads: number;
      writes: number;
    };
    expect(served.writes).toBeGreaterThan(before.writes);
    expect(served).toEqual(d1Counters);
  });

  it("serves the meter in the local entry, and DELETE starts a new window", async () => {
    const ask = (method: string) => SELF.fetch(`${BASE}/__local/meter`, { method });
    const { id, instance } = probe();
    await instance.work(1);
    expect((await ask("DELETE")).status).toBe(200);
    const after = (await (await ask("GET")).json()) as {
      window: { ms: number };
      objects: Record<string, { by_instance: object }>;
    };
    expect(after.window.ms).toBeLessThan(5_000);
    expect(after.objects.Probe.by_instance).not.toHaveProperty(id);
  });
});

describe("the FleetLock pair's storage rows", () => {
  it("reads and writes a few of the coordinator's rows per grant and per release, however many timers it keeps", async () => {
    const f = await fleetWithKey();
    await putGroup(f.fleet, "default", { slots: 4 });
    // Each registration leaves timers on the coordinator (its hostname's reservation), so a
    // request that looked at every timer would read a row per registration.
    const hosts = await registerClients(f.fleet, 12);
    const timers = await runInDurableObject(
      coordinator(f.fleet),
      (_i, state) => state.storage.sql.exec<{ n: number }>("SELECT COUNT(*) AS n FROM _timers").one().n,
    );
    expect(timers).toBeGreaterThanOrEqual(12);
    // One pair first: the coordinator's tables exist and its alarm is set, as on a busy fleet.
    expect((await zincati(f.baseUrl, "pre-reboot", hosts[0].id)).status).toBe(200);
    expect((await zincati(f.baseUrl, "steady-state", hosts[0].id)).status).toBe(200);
    const id = coordinator(f.fleet).id.toString();
    const rows = () =>
      (meterReading().objects.RebootCoordinator as { by_instance: Record<string, any> }).by_instance[id].storage;
    resetMeter();
    expect((await zincati(f.baseUrl, "pre-reboot", hosts[1].id)).status).toBe(200);
    const lock = rows();
    resetMeter();
    expect((await zincati(f.baseUrl, "steady-state", hosts[1].id)).status).toBe(200);
    const unlock = rows();
    // A grant reads the id's registry entry and the outbox rows its two effects replace or extend;
    // it writes the group, the audit row and the console notice (each with its index), once.
    expect(lock.rows_read).toBeLessThanOrEqual(6);
    expect(lock.rows_written).toBeLessThanOrEqual(7);
    expect(unlock.rows_read).toBeLessThanOrEqual(6);
    expect(unlock.rows_written).toBeLessThanOrEqual(7);
  });
});
