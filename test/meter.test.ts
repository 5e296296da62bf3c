import { createExecutionContext, env, waitOnExecutionContext } from "cloudflare:test";
import { eq } from "drizzle-orm";
import { describe, expect, it } from "vitest";
import { createApp } from "../src/app";
import { countingD1, d1RowsInto, getDb, type D1Rows } from "../src/db/client";
import { fleets } from "../src/db/schema";
import { metered, meterReading, resetMeter } from "../src/objects/kit/meter";
import { BASE, call, createFleet, fireTimersNow, registerServer, report, settle, uniq } from "./helpers";
import { sleep } from "./support/objects";

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

function probe(local = "1") {
  const id = uniq("probe");
  const waits: Promise<unknown>[] = [];
  const instance = new MeteredProbe({ id: { toString: () => id }, waitUntil: (p) => void waits.push(p) }, { LOCAL_COUNTERS: local });
  return { id, instance, waits };
}

const probeReading = (id: string) => (meterReading().objects.Probe as { by_instance: Record<string, any> } | undefined)?.by_instance[id];

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

  it("passes straight through, counting nothing, unless LOCAL_COUNTERS is 1", async () => {
    const { id, instance } = probe("");
    expect(await instance.work(1)).toBe("done");
    expect(probeReading(id)).toBeUndefined();
  });

  it("counts D1 rows read and written from each statement's meta, by sender, through raw() and batch() too", async () => {
    const rows: D1Rows = { statements: 0, rowsRead: 0, rowsWritten: 0 };
    const db = getDb(d1RowsInto(env.DB, rows));
    const [a, b] = [uniq("rows"), uniq("rows")];
    const fleet = (id: string) => ({ id, capabilities: {}, staleAfterS: 300, lockTtlS: 600, createdAt: Date.now() });

    // The same statements sent without the meter, for their meta.
    const direct = countingD1(env.DB);
    const insert = await getDb(direct).insert(fleets).values(fleet(a)).run();
    expect(insert.meta.rows_written).toBeGreaterThan(0);
    await db.insert(fleets).values(fleet(b)).run();
    expect(rows).toEqual({ statements: 1, rowsRead: insert.meta.rows_read, rowsWritten: insert.meta.rows_written });

    const select = await direct.prepare("SELECT id FROM fleets").all();
    expect(select.meta.rows_read).toBeGreaterThan(1);
    // drizzle reads through raw(), whose answer carries no meta.
    await countingD1(d1RowsInto(env.DB, rows)).prepare("SELECT id FROM fleets").raw();
    expect(rows.rowsRead).toBe(insert.meta.rows_read + select.meta.rows_read);
    await db.batch([db.select().from(fleets).where(eq(fleets.id, a)), db.select().from(fleets).where(eq(fleets.id, b))]);
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
    const ledger = (reading.objects.ServerLedger as { by_instance: Record<string, any> }).by_instance[env.LEDGER.idFromName(s.id).toString()];
    expect(ledger.d1.rows_written).toBeGreaterThan(0);
  });

  it("counts an object's own storage rows: a ledger's first report writes some, an unchanged one soon after none", async () => {
    const fleet = await createFleet();
    const s = await registerServer(fleet.id);
    const id = env.LEDGER.idFromName(s.id).toString();
    const storageOf = () => (meterReading().objects.ServerLedger as { by_instance: Record<string, any> }).by_instance[id]?.storage;
    resetMeter();
    expect((await call("PUT", "/v1/agent/inventory", { token: s.token, body: report(1, []) })).status).toBe(200);
    await settle(s.id);
    expect(storageOf().rows_written).toBeGreaterThan(0);
    // The first report's console notice waits out its rate window (src/console/notices.ts) in the
    // outbox: delivered before the window that measures the unchanged report.
    await sleep(600);
    await fireTimersNow(env.LEDGER.get(env.LEDGER.idFromName(s.id)));
    resetMeter();
    expect((await call("PUT", "/v1/agent/inventory", { token: s.token, body: report(1, []) })).status).toBe(200);
    expect(storageOf()).toMatchObject({ rows_written: 0 });
  });

  it("serves the meter only where LOCAL_COUNTERS is 1, and DELETE starts a new window", async () => {
    const app = createApp();
    const ask = async (method: string, local: string) => {
      const ctx = createExecutionContext();
      const res = await app.request(`${BASE}/__local/meter`, { method }, { ...env, LOCAL_COUNTERS: local }, ctx);
      await waitOnExecutionContext(ctx);
      return res;
    };
    expect((await ask("GET", "")).status).toBe(404);
    expect((await ask("DELETE", "")).status).toBe(404);
    const { id, instance } = probe();
    await instance.work(1);
    expect((await ask("DELETE", "1")).status).toBe(200);
    const after = (await (await ask("GET", "1")).json()) as { window: { ms: number }; objects: Record<string, { by_instance: object }> };
    expect(after.window.ms).toBeLessThan(5_000);
    expect(after.objects.Probe.by_instance).not.toHaveProperty(id);
  });
});
