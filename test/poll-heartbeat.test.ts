/**
 * The poll as the host's heartbeat (src/ledger/report.ts, pollHeartbeat): a host reporting over
 * HTTP whose reconcile finds nothing new sends its last report's tag on the poll instead of the
 * report, so a steady host costs one request a minute.
 */
import { evictDurableObject, runDurableObjectAlarm, runInDurableObject } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import { MemoryDriver } from "../agent/memory-driver";
import type { ServerLedger } from "../src/ledger/durable-object";
import { confirmMs, QUIET_TIMER, quietGraceMs } from "../src/ledger/quiet";
import { meterReading } from "../src/local/meter";
import { MAX_WAIT_S } from "../src/domain/limits";
import { LATE_DEADLINE_MS } from "../src/webhooks/stale";
import { call, createFleet, registerServer, report, settle } from "./helpers";
import { runAgent, workerFetch } from "./agent-helpers";
import { indexRow, ledger, until } from "./support/objects";

const receivedAt = async (id: string) => Date.parse((await call("GET", `/v1/servers/${id}`)).json.report.received_at);
const agents = [{ name: "compute", image: "reg/compute:1" }];
const waiters = (id: string) =>
  runInDurableObject(ledger(id), (_i: ServerLedger, state) => state.getWebSockets("waiter").length);

/** The stored report's received_at (not the heartbeat in memory). */
const storedAt = (id: string) =>
  runInDurableObject(
    ledger(id),
    (_i: ServerLedger, state) => state.storage.kv.get<{ received_at: number }>("report")!.received_at,
  );
const quietTimer = (id: string) =>
  runInDurableObject(ledger(id), (_i: ServerLedger, state) => {
    const row = state.storage.sql
      .exec<{ due_at: number; payload: string | null }>(
        "SELECT due_at, payload FROM _timers WHERE name = ?",
        QUIET_TIMER,
      )
      .toArray()[0];
    return row ? { dueAt: row.due_at, payload: row.payload === null ? null : JSON.parse(row.payload) } : null;
  });
/** Makes the quiet watch due now (run the alarm next). */
const fireQuiet = (id: string) =>
  runInDurableObject(ledger(id), async (_i: ServerLedger, state) => {
    state.storage.sql.exec("UPDATE _timers SET due_at = ? WHERE name = ?", Date.now() - 1, QUIET_TIMER);
    await state.storage.setAlarm(Date.now() - 1);
  });
const listed = async (fleet: string, id: string) =>
  (await call("GET", `/v1/servers?fleet=${fleet}`)).json.items.find((x: { id: string }) => x.id === id)?.status;

/** Moves the stored report's received_at `agoMs` into the past (as a host silent that long). */
async function age(id: string, agoMs: number) {
  await runInDurableObject(ledger(id), (instance: ServerLedger) => {
    const store = (instance as unknown as { parts: { store: { load(): any; save(p: unknown): void } } }).parts.store;
    store.save({ report: { ...store.load().report, received_at: Date.now() - agoMs } });
  });
}

async function reported(staleAfterS = 120) {
  const fleet = await createFleet({ stale_after_s: staleAfterS });
  const s = await registerServer(fleet.id);
  const put = await call("PUT", "/v1/agent/inventory", { token: s.token, body: report(1, agents) });
  expect(put.status).toBe(200);
  expect(put.json.report_tag).toMatch(/^[0-9a-z]+$/);
  await settle(s.id);
  return { fleet, s, tag: put.json.report_tag as string };
}

const poll = (token: string, tag?: string, wait = 0) =>
  call("GET", `/v1/agent/desired${wait ? `?wait=${wait}` : ""}`, {
    token,
    headers: { "If-None-Match": '"1"', ...(tag === undefined ? {} : { "X-Report-Tag": tag }) },
  });

describe("a poll that names the host's report is its heartbeat", () => {
  it("counts as the report received now, and a poll without the tag does not", async () => {
    const { s, tag } = await reported();
    await age(s.id, 90_000);
    const before = await receivedAt(s.id);
    expect((await poll(s.token)).status).toBe(304);
    expect(await receivedAt(s.id)).toBe(before);
    const t0 = Date.now();
    const counted = await poll(s.token, tag);
    expect(counted.status).toBe(304);
    expect(counted.headers.get("X-Report-Tag")).toBe(tag);
    expect(await receivedAt(s.id)).toBeGreaterThanOrEqual(t0 - 1);
    expect((await poll(s.token)).headers.get("X-Report-Tag")).toBeNull();
  });

  it("counts on a long poll too, at its start", async () => {
    const { s, tag } = await reported();
    await age(s.id, 90_000);
    const t0 = Date.now();
    expect((await poll(s.token, tag, 1)).status).toBe(304);
    const at = await receivedAt(s.id);
    expect(at).toBeGreaterThanOrEqual(t0 - 1);
    expect(at).toBeLessThan(t0 + 900);
  });

  it("is kept by the poll's waiter: a ledger evicted while its host's poll waits still knows when it last heard from it", async () => {
    const { s, tag } = await reported();
    // Persisted 100 s ago: the poll's heartbeat is then kept in memory and in its waiter only.
    await age(s.id, 100_000);
    const t0 = Date.now();
    const parked = poll(s.token, tag, 10);
    await until(async () => (await waiters(s.id)) === 1);
    await evictDurableObject(ledger(s.id));
    expect(await receivedAt(s.id)).toBeGreaterThanOrEqual(t0 - 1);
    await call("PUT", `/v1/servers/${s.id}/desired`, { body: { generation: 2, agents: [] } });
    expect((await parked).status).toBe(200);
  });

  it("is still known after a poll that outlived an eviction has ended (its waiter closed)", async () => {
    const { s, tag } = await reported();
    await age(s.id, 100_000);
    const t0 = Date.now();
    const parked = poll(s.token, tag, 2);
    await until(async () => (await waiters(s.id)) === 1);
    await evictDurableObject(ledger(s.id));
    expect((await parked).status).toBe(304);
    await until(async () => (await waiters(s.id)) === 0);
    expect(await receivedAt(s.id)).toBeGreaterThanOrEqual(t0 - 1);
  });

  it("is not stored, however old the stored report: memory and the poll's waiter hold it", async () => {
    const { s, tag } = await reported();
    await age(s.id, 100_000);
    const old = await storedAt(s.id);
    expect((await poll(s.token, tag)).status).toBe(304);
    expect(await storedAt(s.id)).toBe(old);
    expect(await receivedAt(s.id)).toBeGreaterThan(old + 90_000);
    // Older than stale_after (120 s) and its grace: still not stored, while the quiet watch is sure.
    await age(s.id, 250_000);
    expect((await poll(s.token, tag)).status).toBe(304);
    expect(await storedAt(s.id)).toBeLessThan(Date.now() - 240_000);
  });

  it("costs no storage row, and the quiet watch moving on costs two (the cost benchmark's arithmetic)", async () => {
    const { s, tag } = await reported();
    const written = () =>
      (meterReading().objects.ServerLedger as { by_instance: Record<string, { storage: { rows_written: number } }> })
        .by_instance[ledger(s.id).id.toString()].storage.rows_written;
    // The first poll's heartbeat marks the watch as fed by polls: one row, once per watch.
    await poll(s.token, tag);
    await settle(s.id);
    await age(s.id, 121_000);
    // The console's notice of that change leaves the outbox half a second later: not the polls'.
    await new Promise((r) => setTimeout(r, 700));
    await settle(s.id);
    let before = written();
    for (let i = 0; i < 3; i++) await poll(s.token, tag);
    expect(written() - before, "polls whose heartbeat stays in memory").toBe(0);
    await fireQuiet(s.id);
    before = written();
    await runDurableObjectAlarm(ledger(s.id));
    // Its timer's row, and the alarm set again for it (each setAlarm() is billed as a row written).
    expect(written() - before, "the quiet watch moving on").toBe(2);
    expect((await quietTimer(s.id))!.payload).toEqual({ polls: true });
  });

  it("is not lost with the ledger's memory: a watch falling due with no sign of the host looks again, and the heartbeat heard meanwhile is stored", async () => {
    const { fleet, s, tag } = await reported();
    expect((await poll(s.token, tag)).status).toBe(304);
    await settle(s.id);
    // The host between two polls while its ledger was evicted: only the stored report is left, and
    // it is older than stale_after and its grace.
    await age(s.id, 120_000 + quietGraceMs(120) + 1_000);
    await evictDurableObject(ledger(s.id));
    await fireQuiet(s.id);
    const t0 = Date.now();
    await runDurableObjectAlarm(ledger(s.id));
    const doubt = (await quietTimer(s.id))!;
    expect(doubt.payload).toEqual({ polls: true, doubt_since: expect.any(Number) });
    expect(doubt.dueAt).toBeGreaterThanOrEqual(t0 + confirmMs(120));
    expect(await listed(fleet.id, s.id), "not told stale while in doubt").not.toBe("stale");
    // The host's next poll: its heartbeat is stored, once.
    const t1 = Date.now();
    expect((await poll(s.token, tag)).status).toBe(304);
    const stored = await storedAt(s.id);
    expect(stored).toBeGreaterThanOrEqual(t1 - 1);
    expect((await poll(s.token, tag)).status).toBe(304);
    expect(await storedAt(s.id)).toBe(stored);
    // Found alive when it looks again, whatever the ledger forgot meanwhile.
    await evictDurableObject(ledger(s.id));
    await fireQuiet(s.id);
    await runDurableObjectAlarm(ledger(s.id));
    const again = (await quietTimer(s.id))!;
    expect(again.payload).toEqual({ polls: true });
    expect(again.dueAt).toBe(stored + 120_000 + quietGraceMs(120));
    expect(await listed(fleet.id, s.id)).not.toBe("stale");
  });

  it("waits in doubt longer than a poll may last, and short enough for the index's late deadline", () => {
    for (const staleAfterS of [300, 3600, 86_400]) {
      expect(confirmMs(staleAfterS)).toBeGreaterThanOrEqual(2 * MAX_WAIT_S * 1000);
      expect(confirmMs(staleAfterS) + quietGraceMs(staleAfterS)).toBeLessThan(LATE_DEADLINE_MS);
    }
    // A short stale_after: a heartbeat heard while in doubt keeps the watch due after the next look.
    expect(confirmMs(10)).toBeLessThan(10_000 + quietGraceMs(10));
  });

  it("a host that sends nothing while the watch is in doubt is told stale when it looks again, with its exact stale_at", async () => {
    const { fleet, s, tag } = await reported();
    expect((await poll(s.token, tag)).status).toBe(304);
    await settle(s.id);
    await age(s.id, 120_000 + quietGraceMs(120) + 1_000);
    const last = await storedAt(s.id);
    await evictDurableObject(ledger(s.id));
    await fireQuiet(s.id);
    await runDurableObjectAlarm(ledger(s.id));
    expect(await listed(fleet.id, s.id)).not.toBe("stale");
    await fireQuiet(s.id);
    await runDurableObjectAlarm(ledger(s.id));
    await settle(s.id);
    expect(await listed(fleet.id, s.id)).toBe("stale");
    expect((await indexRow(s.id))!.stale_at).toBe(last + 120_000);
    expect(await quietTimer(s.id)).toBeNull();
  });

  it("the report answers the same tag for the same content, and another for other content", async () => {
    const { s, tag } = await reported();
    const again = await call("PUT", "/v1/agent/inventory", { token: s.token, body: report(1, agents) });
    expect(again.json.report_tag).toBe(tag);
    const other = await call("PUT", "/v1/agent/inventory", { token: s.token, body: report(1, []) });
    expect(other.json.report_tag).not.toBe(tag);
  });

  it("refuses a tag that is not the stored report's with 412 report_tag_unknown, and changes nothing", async () => {
    const { s, tag } = await reported();
    await call("PUT", "/v1/agent/inventory", { token: s.token, body: report(1, []) });
    await age(s.id, 90_000);
    const before = await receivedAt(s.id);
    for (const wait of [0, 5]) {
      const res = await poll(s.token, tag, wait);
      expect(res.status).toBe(412);
      expect(res.json.error.code).toBe("report_tag_unknown");
    }
    expect(await receivedAt(s.id)).toBe(before);
  });

  it("refuses a malformed tag with 400 and changes nothing", async () => {
    const { s } = await reported();
    await age(s.id, 90_000);
    const before = await receivedAt(s.id);
    for (const bad of ["", "UPPER", "x".repeat(33), "a b"]) {
      const res = await poll(s.token, bad);
      expect(res.status, JSON.stringify(bad)).toBe(400);
      expect(res.json.error.code).toBe("invalid_header");
    }
    expect(await receivedAt(s.id)).toBe(before);
  });

  it("does not answer an operator's refresh: the poll says so and the host must report afresh", async () => {
    const { s, tag } = await reported();
    expect((await call("POST", `/v1/servers/${s.id}/refresh`)).status).toBe(200);
    const res = await poll(s.token, tag);
    expect(res.status).toBe(200);
    expect(res.json.refresh).toBeDefined();
    expect((await poll(s.token, tag)).json.refresh).toBeDefined();
    await call("PUT", "/v1/agent/inventory", { token: s.token, body: report(1, agents) });
    expect((await poll(s.token, tag)).status).toBe(304);
  });

  it("brings a host the quiet watch saw go quiet back into the index", async () => {
    const { fleet, s, tag } = await reported();
    await age(s.id, 120_000 + quietGraceMs(120) + 1_000);
    await fireQuiet(s.id);
    await runDurableObjectAlarm(ledger(s.id));
    expect(await listed(fleet.id, s.id)).toBe("stale");
    expect((await poll(s.token, tag)).status).toBe(304);
    await settle(s.id);
    expect(await listed(fleet.id, s.id)).not.toBe("stale");
    expect((await indexRow(s.id))!.stale_at).toBeGreaterThan(Date.now());
  });
});

describe("the reference agent over HTTP", () => {
  it("reports once, then lets its polls carry the heartbeat while nothing changes, and reports again on a change", async () => {
    const fleet = await createFleet();
    const s = await registerServer(fleet.id);
    const seen: string[] = [];
    const counting = (input: string | URL | Request, init?: RequestInit) => {
      const headers = new Headers(init?.headers);
      seen.push(
        `${init?.method ?? "GET"} ${new URL(String(input)).pathname}${headers.has("X-Report-Tag") ? " tagged" : ""}`,
      );
      return workerFetch(input, init);
    };
    const driver = new MemoryDriver();
    const run = runAgent(s.token, driver, {
      transport: "http",
      fetch: counting,
      waitS: 1,
      reportIntervalMs: 300,
      minPollIntervalMs: 100,
    });
    try {
      await run.until((e) => e.type === "unchanged");
      await run.until(() => seen.filter((x) => x === "GET /v1/agent/desired tagged").length >= 3);
      expect(seen.filter((x) => x.startsWith("PUT")).length).toBe(1);
      const view = await call("GET", `/v1/servers/${s.id}`);
      expect(Date.now() - Date.parse(view.json.report.received_at)).toBeLessThan(3_000);

      await call("PUT", `/v1/servers/${s.id}/desired`, {
        body: { generation: 2, agents: [{ name: "logs", image: "reg/logs:1", version: "1" }] },
      });
      await run.until((e) => e.type === "reported" && e.generation === 2);
      expect(seen.filter((x) => x.startsWith("PUT")).length).toBe(2);
    } finally {
      run.stop();
    }
  });

  it("keeps reporting in full when its polls' heartbeat is not said back (a proxy dropped the header)", async () => {
    const fleet = await createFleet();
    const s = await registerServer(fleet.id);
    const stripping = (input: string | URL | Request, init?: RequestInit) => {
      const headers = new Headers(init?.headers);
      headers.delete("X-Report-Tag");
      return workerFetch(input, { ...init, headers });
    };
    const run = runAgent(s.token, new MemoryDriver(), {
      transport: "http",
      fetch: stripping,
      waitS: 1,
      reportIntervalMs: 300,
      minPollIntervalMs: 100,
    });
    try {
      await run.until(() => run.events.filter((e) => e.type === "reported").length >= 3);
      expect(run.events.some((e) => e.type === "unchanged")).toBe(false);
      const view = await call("GET", `/v1/servers/${s.id}`);
      expect(Date.now() - Date.parse(view.json.report.received_at)).toBeLessThan(3_000);
    } finally {
      run.stop();
    }
  });

  it("reports in full at once when the server holds another report than the one its poll names", async () => {
    const fleet = await createFleet();
    const s = await registerServer(fleet.id);
    const driver = new MemoryDriver();
    const run = runAgent(s.token, driver, {
      transport: "http",
      waitS: 1,
      reportIntervalMs: 300,
      minPollIntervalMs: 100,
    });
    try {
      await run.until((e) => e.type === "unchanged");
      // Another report behind the agent's back (a second process with the same token, say).
      await call("PUT", "/v1/agent/inventory", { token: s.token, body: report(1, []) });
      const n = run.events.filter((e) => e.type === "reported").length;
      await run.until((e) => e.type === "error" && (e.error as { code?: string }).code === "report_tag_unknown");
      await run.until(() => run.events.filter((e) => e.type === "reported").length > n);
      const view = await call("GET", `/v1/servers/${s.id}`);
      expect(view.json.report.boot_id).toBe("boot-a");
    } finally {
      run.stop();
    }
  });
});
