/**
 * What a ledger's wake costs in statements: every host in a real fleet waits with its ledger
 * asleep, so a rollout's write into it, and a long poll's opening and closing, start it anew each
 * time. Counted as the local meter counts storage (src/local/storage-meter.ts: each SQL statement,
 * each KV key), plus the transactions it opens and the alarms it sets, on a new instance of a
 * ledger built on the stored state, as the runtime builds one when it wakes the object.
 */
import { env, evictDurableObject, runInDurableObject } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import { ServerLedger } from "../src/ledger/durable-object";
import { meterStorage, type StorageRows } from "../src/local/storage-meter";
import { call, reportingServer } from "./helpers";
import { sleep } from "./support/objects";

/**
 * Measured 6: the format, record, desired config, report and an old release's key (KV), and the
 * ledger's timers in one read. Before: 8 and a transaction (its timers' table probed, then its
 * quiet watch's timer and the earliest read apart; an empty transaction around what an older
 * release left to move, which nearly no wake has).
 */
const WAKE_STATEMENTS = 6;

const agents = [{ name: "web", image: "web:1", version: "1" }];

interface Counted {
  statements: number;
  transactions: number;
  rowsRead: number;
  rowsWritten: number;
  alarmsSet: number;
  lines: string[];
}

/**
 * Builds a new instance of the ledger on `state` (its wake), waits for its opening, then runs
 * `then` on it: the statements of both, counted.
 */
async function wake(state: DurableObjectState, then: (woken: ServerLedger) => Promise<unknown> = async () => {}) {
  const rows: StorageRows = { rowsRead: 0, rowsWritten: 0, alarmsSet: 0, storedBytes: 0, byStatement: new Map() };
  const settle = meterStorage(state.storage, rows);
  let transactions = 0;
  const transactionSync = state.storage.transactionSync.bind(state.storage);
  state.storage.transactionSync = (<T>(fn: () => T) => {
    transactions++;
    return transactionSync(fn);
  }) as typeof state.storage.transactionSync;
  try {
    const woken = new ServerLedger(state, env as never);
    // Its opening runs under blockConcurrencyWhile, after this turn.
    await sleep(20);
    await then(woken);
    settle();
  } finally {
    state.storage.transactionSync = transactionSync;
  }
  const lines = [...rows.byStatement].map(([s, r]) => `${r.calls}× ${r.rowsRead}/${r.rowsWritten} ${s.slice(0, 100)}`);
  return {
    statements: [...rows.byStatement.entries()].filter(([s]) => s !== "setAlarm").reduce((n, [, r]) => n + r.calls, 0),
    transactions,
    rowsRead: rows.rowsRead,
    rowsWritten: rows.rowsWritten,
    alarmsSet: rows.alarmsSet,
    lines,
  } satisfies Counted;
}

describe("a ledger's wake", () => {
  it("reads its state and its timers in a few statements, opens no transaction and leaves its alarm as set", async () => {
    // A running host's ledger: a report taken, the quiet watch's timer set and the alarm with it.
    const { stub } = await reportingServer(agents as never);
    const c = await runInDurableObject(stub, async (_i, state) => {
      const alarm = await state.storage.getAlarm();
      expect(alarm).not.toBeNull();
      const counted = await wake(state);
      expect(await state.storage.getAlarm()).toBe(alarm);
      return counted;
    });
    await evictDurableObject(stub);
    const why = c.lines.join("\n");
    expect(c.transactions, why).toBe(0);
    expect(c.statements, why).toBeLessThanOrEqual(WAKE_STATEMENTS);
    expect({ rowsWritten: c.rowsWritten, alarmsSet: c.alarmsSet }, why).toEqual({ rowsWritten: 0, alarmsSet: 0 });
  });

  it("takes a rollout's write on waking without probing for its kit tables first", async () => {
    const { s, stub } = await reportingServer(agents as never);
    const write = {
      rollout_id: `r-${crypto.randomUUID()}`,
      pass: 0,
      agent: "web",
      image: "web:2",
      version: "2",
      sent_at: Date.now() + 60_000,
    };
    const c = await runInDurableObject(stub, (_i, state) =>
      wake(state, async (woken) => {
        expect(await woken.applyRolloutImage(write)).toMatchObject({ ok: true, generation: 3 });
        expect(state.storage.kv.get("desired")).toMatchObject({ generation: 3 });
      }),
    );
    // The runtime's own instance still holds the config it read before the write above.
    await evictDurableObject(stub);
    const why = c.lines.join("\n");
    // A probe reads no row: `SELECT 1 FROM <table> LIMIT 0` before the table's first read or write.
    expect(
      c.lines.filter((l) => l.includes("LIMIT 0")),
      why,
    ).toEqual([]);
    // The write's own turn, the only one: its desired config, marks and two outbox rows.
    expect(c.transactions, why).toBe(1);
    const { json } = await call("GET", `/v1/servers/${s.id}/desired`);
    expect(json).toMatchObject({ generation: 3, agents: [{ name: "web", image: "web:2" }] });
  });
});
