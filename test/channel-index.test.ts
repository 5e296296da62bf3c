import { env, evictDurableObject, runDurableObjectAlarm, runInDurableObject } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import { ServerLedger } from "../src/ledger/durable-object";
import { INDEX_LEASE_MS } from "../src/ledger/projection";
import { call, createFleet, registerServer, report, settle } from "./helpers";
import { emptyReporter, openChannel, upgrade } from "./channel-helpers";
import { LEFT_TIMER } from "../src/ledger/quiet";
import { indexRow, ledger, sleep } from "./support/objects";

const A = { name: "a", image: "a:1" };

async function until<T>(read: () => Promise<T>, pred: (v: T) => boolean, ms = 5_000) {
  const deadline = Date.now() + ms;
  for (;;) {
    const v = await read();
    if (pred(v)) return v;
    if (Date.now() > deadline) throw new Error(`condition not met: ${JSON.stringify(v)}`);
    await sleep(50);
  }
}

describe("the index's staleness while a host is on the channel", () => {
  it("is leased (stale_at one lease beyond last_seen + stale_after) while connected, and exact as soon as the socket closes", async () => {
    const fleet = await createFleet({ stale_after_s: 300 });
    const s = await registerServer(fleet.id);
    await call("PUT", `/v1/servers/${s.id}/desired`, {
      body: { generation: 2, agents: [{ name: "a", image: "a:1", version: "1" }] },
    });
    const ch = await openChannel(s.token, { generation: 2 });
    ch.send({ type: "report", v: 1, id: "r", report: report(2, [A]) });
    expect((await ch.next("ack")).status).toBe(200);
    await settle(s.id);
    const leased = (await indexRow(s.id))!;
    expect(leased.stale_at).toBe(leased.last_seen + 300_000 + INDEX_LEASE_MS);

    ch.close();
    const exact = await until(
      () => indexRow(s.id),
      (r) => r!.stale_at === r!.last_seen + 300_000,
    );
    expect(exact!.last_seen).toBe(leased.last_seen);
  });

  it("is exact again when the ledger closes the socket itself (a revoked token)", async () => {
    const fleet = await createFleet({ stale_after_s: 300 });
    const s = await registerServer(fleet.id);
    const ch = await openChannel(s.token, { generation: 1 });
    ch.send({ type: "report", v: 1, id: "r", report: report(1, []) });
    expect((await ch.next("ack")).status).toBe(200);
    await settle(s.id);
    const leased = (await indexRow(s.id))!;
    expect(leased.stale_at).toBe(leased.last_seen + 300_000 + INDEX_LEASE_MS);
    await call("DELETE", `/v1/tokens/${s.id}`);
    await ch.closed;
    await until(
      () => indexRow(s.id),
      (r) => r!.stale_at === r!.last_seen + 300_000,
    );
  });

  it("refreshes a connected host's last_seen only once a lease has passed, and a heartbeat's refresh leaves no alarm to wake the ledger", async () => {
    const fleet = await createFleet({ stale_after_s: 300 });
    const s = await registerServer(fleet.id);
    const ch = await openChannel(s.token, { generation: 1 });
    const send = emptyReporter(ch, s.id);
    await send("first");
    const first = (await indexRow(s.id))!;
    // Heartbeats within the lease (even past the exact mode's 150 s) leave the row alone.
    await runInDurableObject(ledger(s.id), (_i, state) => {
      const mark = state.storage.kv.get<any>("projected");
      (_i as any).parts.store.setProjected({ ...mark, last_seen_written: mark.last_seen_written - 10 * 60_000 });
    });
    await sleep(5);
    await send("within");
    expect((await indexRow(s.id))!.last_seen).toBe(first.last_seen);
    // Past the lease: refreshed, and nothing is left on the alarm.
    while (await runDurableObjectAlarm(ledger(s.id)));
    await runInDurableObject(ledger(s.id), (_i, state) => {
      const mark = state.storage.kv.get<any>("projected");
      (_i as any).parts.store.setProjected({ ...mark, last_seen_written: mark.last_seen_written - INDEX_LEASE_MS });
    });
    await sleep(5);
    await send("past");
    const refreshed = (await indexRow(s.id))!;
    expect(refreshed.last_seen).toBeGreaterThan(first.last_seen);
    expect(refreshed.stale_at).toBe(refreshed.last_seen + 300_000 + INDEX_LEASE_MS);
    expect(await runInDurableObject(ledger(s.id), (_i, state) => state.storage.getAlarm())).toBeNull();
    ch.close();
  });

  it("is exact again when the ledger wakes without its host's socket (a reset dropped it, no close came)", async () => {
    const fleet = await createFleet({ stale_after_s: 300 });
    const s = await registerServer(fleet.id);
    const ch = await openChannel(s.token, { generation: 1 });
    await emptyReporter(ch, s.id)("first");
    const leased = (await indexRow(s.id))!;
    expect(leased.stale_at).toBe(leased.last_seen + 300_000 + INDEX_LEASE_MS);
    await runInDurableObject(ledger(s.id), async (_i, state) => {
      // The ledger as a reset leaves it: its storage, and no socket (none was closed in its sight).
      const sockets = state.getWebSockets;
      Object.defineProperty(state, "getWebSockets", { value: () => [], configurable: true });
      try {
        const woken = new ServerLedger(state, env as never);
        // Its opening runs under blockConcurrencyWhile, after this turn.
        await sleep(50);
        // Its outbox delivered now rather than by the safety alarm 10 s on.
        state.storage.sql.exec("UPDATE _timers SET due_at = 0");
        await woken.alarm();
      } finally {
        Object.defineProperty(state, "getWebSockets", { value: sockets, configurable: true });
      }
    });
    const exact = (await indexRow(s.id))!;
    expect(exact.stale_at).toBe(leased.last_seen + 300_000);
    ch.close();
  });
});

describe("the left timer of a host that reboots", () => {
  /** The ledger's timers by name, and its alarm. */
  const timersOf = (id: string) =>
    runInDurableObject(ledger(id), async (_i, state) => ({
      timers: state.storage.sql
        .exec<{ name: string; due_at: number }>("SELECT name, due_at FROM _timers ORDER BY name")
        .toArray()
        .map((t) => t.name),
      left: state.storage.sql
        .exec<{ due_at: number }>("SELECT due_at FROM _timers WHERE name = ?", LEFT_TIMER)
        .toArray()[0]?.due_at,
      alarm: await state.storage.getAlarm(),
    }));

  /**
   * What the left timer costs the ledger's storage from here on: the rows its own statements write
   * and the alarm writes (setAlarm, deleteAlarm) at or about its time. Counted by wrapping the
   * object's storage in place (the test runs in the object's isolate).
   */
  const countLeftTimer = (id: string) =>
    runInDurableObject(ledger(id), (_i, state) => {
      const counted = { rows: [] as { rowsWritten: number }[], alarmWrites: [] as (number | null)[] };
      const sql = state.storage.sql;
      const exec = sql.exec.bind(sql);
      sql.exec = ((query: string, ...bindings: unknown[]) => {
        const cursor = exec(query, ...bindings);
        if (query.includes("_timers") && bindings[0] === LEFT_TIMER) counted.rows.push(cursor);
        return cursor;
      }) as typeof sql.exec;
      const setAlarm = state.storage.setAlarm.bind(state.storage);
      state.storage.setAlarm = ((at: number | Date, ...rest: []) => {
        counted.alarmWrites.push(Number(at));
        return setAlarm(at, ...rest);
      }) as typeof state.storage.setAlarm;
      const deleteAlarm = state.storage.deleteAlarm.bind(state.storage);
      state.storage.deleteAlarm = ((...rest: []) => {
        counted.alarmWrites.push(null);
        return deleteAlarm(...rest);
      }) as typeof state.storage.deleteAlarm;
      (globalThis as { leftTimerCount?: typeof counted }).leftTimerCount = counted;
    });
  const leftTimerCounted = () => {
    const counted = (
      globalThis as { leftTimerCount?: { rows: { rowsWritten: number }[]; alarmWrites: (number | null)[] } }
    ).leftTimerCount!;
    return { rowsWritten: counted.rows.reduce((n, c) => n + c.rowsWritten, 0), alarmWrites: counted.alarmWrites };
  };

  it("is cancelled when the host is back on the channel: its return leaves no alarm to wake the ledger for nothing", async () => {
    const fleet = await createFleet({ stale_after_s: 300 });
    const s = await registerServer(fleet.id);
    const ch = await openChannel(s.token, { generation: 1 });
    ch.send({ type: "report", v: 1, id: "r", report: report(1, [], { boot_id: "boot-1" }) });
    expect((await ch.next("ack")).status).toBe(200);
    await settle(s.id);
    await countLeftTimer(s.id);
    // The host goes down to reboot: the ledger times its absence on its alarm.
    ch.close();
    const gone = await until(
      () => timersOf(s.id),
      (t) => t.left !== undefined && !t.timers.includes("outbox"),
    );
    // The outbox's safety alarm, if still set, fires and hands the alarm to the left timer.
    if (gone.alarm !== gone.left) await runDurableObjectAlarm(ledger(s.id));
    expect(await timersOf(s.id)).toMatchObject({ timers: [LEFT_TIMER], alarm: gone.left });

    // Back from the reboot: a new socket, a new boot's report.
    const again = await openChannel(s.token, { generation: 1 });
    // Its timer gone with the alarm it held (nothing else was set).
    expect(await timersOf(s.id)).toEqual({ timers: [], left: undefined, alarm: null });
    // The drop and the return: the timer's row inserted and deleted, the alarm set to it and
    // removed. Without the cancel the row would be deleted by the alarm's wake instead, and the
    // removal is the one write the wake is traded for (docs/benchmarks.md, fleet leftovers).
    // (The close's own outbox may set a safety alarm of its own, earlier, and take it back once
    // delivered: not the timer's, so the count starts where the timer's alarm was set.)
    const counted = leftTimerCounted();
    expect(counted.rowsWritten).toBe(2);
    const sinceLeft = counted.alarmWrites.slice(counted.alarmWrites.indexOf(gone.left));
    expect(sinceLeft.filter((at) => at === null || at === gone.left)).toEqual([gone.left, null]);
    again.send({ type: "report", v: 1, id: "r2", report: report(1, [], { boot_id: "boot-2" }) });
    expect((await again.next("ack")).status).toBe(200);
    await settle(s.id);
    const back = await timersOf(s.id);
    expect(back.timers).not.toContain(LEFT_TIMER);
    expect(back.alarm).not.toBe(gone.left);
    // What the report left (its outbox: a console notice waits out the feed's window) runs and
    // leaves nothing set: no alarm at the left timer's time.
    await until(
      async () => {
        const t = await timersOf(s.id);
        if (t.alarm !== null) await runDurableObjectAlarm(ledger(s.id));
        return t;
      },
      (t) => t.alarm === null,
    );
    expect(await timersOf(s.id)).toEqual({ timers: [], left: undefined, alarm: null });
    again.close();
  });

  it("stays set when an upgrade is refused: a wrong token is not the host back", async () => {
    const fleet = await createFleet({ stale_after_s: 300 });
    const s = await registerServer(fleet.id);
    const ch = await openChannel(s.token, { generation: 1 });
    ch.send({ type: "report", v: 1, id: "r", report: report(1, [], { boot_id: "boot-1" }) });
    expect((await ch.next("ack")).status).toBe(200);
    await settle(s.id);
    ch.close();
    await until(
      () => timersOf(s.id),
      (t) => t.left !== undefined,
    );
    // A refused upgrade (a wrong token) is not the host back: the timer stays. The token names
    // this server, so the ledger itself is asked and refuses it (one naming no server is refused
    // before it reaches the ledger, and would prove nothing here).
    expect((await upgrade(`hms.${s.id}.${"A".repeat(43)}`, { generation: 1 })).status).toBe(401);
    expect((await timersOf(s.id)).timers).toContain(LEFT_TIMER);
  });
});

describe("a connected host's heartbeat", () => {
  it("costs the ledger no storage write: it lives in the socket, outlives an eviction, and is stored when the socket closes", async () => {
    const fleet = await createFleet({ stale_after_s: 300 });
    const s = await registerServer(fleet.id);
    const ch = await openChannel(s.token, { generation: 1 });
    const send = emptyReporter(ch, s.id);
    const stored = () =>
      runInDurableObject(
        ledger(s.id),
        (_i, state) => state.storage.kv.get<{ received_at: number }>("report")!.received_at,
      );
    await send("first");
    const first = await stored();
    // Long after the HTTP route would have stored it, an unchanged report is still kept in memory only.
    await runInDurableObject(ledger(s.id), (instance) => {
      const cache = (instance as any).parts.store.load();
      cache.persistedAt -= 10 * 60_000;
    });
    await sleep(5);
    await send("second");
    expect(await stored()).toBe(first);
    const heard = Date.parse((await call("GET", `/v1/servers/${s.id}`)).json.last_seen);
    expect(heard).toBeGreaterThan(first);

    await evictDurableObject(ledger(s.id));
    expect(Date.parse((await call("GET", `/v1/servers/${s.id}`)).json.last_seen)).toBe(heard);
    expect(await stored()).toBe(first);

    ch.close();
    await until(stored, (at) => at === heard);
  });
});
