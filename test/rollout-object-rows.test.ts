/**
 * The storage rows a Rollout object reads and writes per target, counted as the local meter
 * counts them (src/local/storage-meter.ts: each SQL cursor's rows, a row per KV key, each
 * setAlarm). Rows read are what a regression hides in (a scan per turn grows with the targets in
 * flight); rows written are billed a thousand times dearer, each index entry touched among them.
 */
import { env, runInDurableObject } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import { meterStorage, type StorageRows } from "../src/local/storage-meter";
import { RolloutInput } from "../src/rollouts/schemas";
import { createRollout } from "../src/rollouts/service";
import { call, settle } from "./helpers";
import {
  AGENT,
  drain,
  fleetWithAgent,
  hostReconcile,
  NEW,
  rolloutStub,
  startRollout,
  targets,
} from "./rollout-helpers";

/**
 * Measured 14.75 read and 12.25 written; before the rows were cut, 16 and 22.9 (every column of a
 * target written at every step, so an entry in every index; the event log's AUTOINCREMENT; the
 * core stored at every change; a key per ledger write).
 */
const READ_PER_TARGET = 15.5;
const WRITTEN_PER_TARGET = 13;
/**
 * Statements on the scheduler's table (timers set or cancelled) a target: measured 0 since the
 * object learns its timers once a turn commits (0.92 without its commit hook; the bound was 1.5).
 */
const TIMER_STATEMENTS_PER_TARGET = 0.5;

type Meter = { rows: StorageRows; settle: () => void };

/** Meters the rollout object's storage from now on (its handles are wrapped in place). */
const meterRollout = (id: string) =>
  runInDurableObject(rolloutStub(id), (_i, state) => {
    const rows: StorageRows = { rowsRead: 0, rowsWritten: 0, alarmsSet: 0, storedBytes: 0, byStatement: new Map() };
    const settleRows = meterStorage(state.storage, rows);
    return { rows, settle: settleRows } satisfies Meter;
  });

const counted = (id: string, meter: Meter) =>
  runInDurableObject(rolloutStub(id), () => {
    meter.settle();
    return {
      read: meter.rows.rowsRead,
      written: meter.rows.rowsWritten,
      timerStatements: [...meter.rows.byStatement]
        .filter(([s]) => s.includes("INSERT INTO _timers") || s.includes("DELETE FROM _timers WHERE name = ?"))
        .reduce((sum, [, r]) => sum + r.calls, 0),
      statements: [...meter.rows.byStatement].map(([s, r]) => `${r.rowsRead}/${r.rowsWritten} ${s.slice(0, 90)}`),
    };
  });

describe("the rollout object's rows per target", () => {
  it("reads and writes a few rows a target: its row, its events, its core once a turn, its write", async () => {
    const n = 12;
    const { fleet, hosts } = await fleetWithAgent(n);
    const r = await startRollout({ fleet, concurrency: 6 });
    const meter = await meterRollout(r.id);
    const byId = new Map(hosts.map((h) => [h.id, h]));
    // Each host reports as soon as its target applies; every report ends one target and starts
    // the next (the rollout's steady state).
    for (let round = 0; round < n; round++) {
      const applying = await targets(r.id, "?state=applying");
      if (applying.length === 0) break;
      for (const t of applying) {
        await hostReconcile(byId.get(t.server_id)!);
        await settle(t.server_id);
      }
      await drain(r.id);
    }
    const final = await call("GET", `/v1/rollouts/${r.id}`);
    expect(final.json.state).toBe("succeeded");
    const c = await counted(r.id, meter);
    const perTarget = { read: c.read / n, written: c.written / n };
    console.log(JSON.stringify(perTarget));
    // Per target, in this order of events: its row, its two events, the core once per turn, its
    // write's outbox row, its share of the index's rows. Named on failure: which statement moved.
    expect(perTarget.read, c.statements.join("\n")).toBeLessThanOrEqual(READ_PER_TARGET);
    expect(perTarget.written, c.statements.join("\n")).toBeLessThanOrEqual(WRITTEN_PER_TARGET);
    // The timers a target's start and end ask for (the projection's, the deadline's, the slow
    // check's) reach the scheduler's table only when they move (./timer-memo.ts): 1 statement a
    // target measured, 3.3 when each ask was a statement.
    expect(c.timerStatements / n, c.statements.join("\n")).toBeLessThanOrEqual(TIMER_STATEMENTS_PER_TARGET);
    // The index took every target's end.
    const rows = await env.DB.prepare("SELECT state, generation, ended_at FROM rollout_targets WHERE rollout_id = ?")
      .bind(r.id)
      .all();
    expect(rows.results).toHaveLength(n);
    expect(rows.results.every((x) => x.state === "done" && x.generation === 3 && x.ended_at !== null)).toBe(true);
  });
});

describe("the rollout's target rows in D1", () => {
  it("go many to a statement, each row as the rollout holds it", async () => {
    const n = 20;
    const { fleet } = await fleetWithAgent(n);
    const id = crypto.randomUUID();
    // The object's D1 binding counts the statements that write target rows.
    const sent: string[] = [];
    await runInDurableObject(rolloutStub(id), (instance) => {
      const db = env.DB;
      const counting = new Proxy(db, {
        get(target, prop) {
          if (prop === "batch")
            return (stmts: D1PreparedStatement[]) => {
              for (const s of stmts) {
                const text = (s as unknown as { statement?: string }).statement ?? String(s);
                if (text.includes("rollout_targets")) sent.push(text);
              }
              return target.batch(stmts);
            };
          const v = Reflect.get(target, prop);
          return typeof v === "function" ? v.bind(target) : v;
        },
      });
      (instance as any).env = { ...(instance as any).env, DB: counting };
    });
    const input = RolloutInput.parse({ fleet, agent: AGENT, image: NEW, version: "2.0.0", concurrency: 5 });
    await createRollout(env, "token:test", input, () => id);
    await drain(id);
    // The first pass's 20 rows reached the index in one statement (8 to a statement before: 3).
    expect(sent).toHaveLength(1);
    const rows = await env.DB.prepare(
      "SELECT server_id, hostname, state, image, from_image, generation, started_at, ended_at, reason FROM rollout_targets WHERE rollout_id = ? ORDER BY server_id",
    )
      .bind(id)
      .all();
    const held = (await targets(id, "?limit=100")).sort((a, b) => (a.server_id < b.server_id ? -1 : 1));
    expect(rows.results).toHaveLength(n);
    expect(rows.results.map((r) => [r.server_id, r.hostname, r.image])).toEqual(
      held.map((t) => [t.server_id, t.hostname, NEW]),
    );
    // As the rollout held each one when the rows went: the first `concurrency` applying, the rest queued.
    expect(rows.results.filter((r) => r.state === "applying")).toHaveLength(5);
    expect(rows.results.filter((r) => r.state === "queued")).toHaveLength(n - 5);
    expect(rows.results.every((r) => r.reason === null && r.ended_at === null)).toBe(true);
    // They went in seq order from a cursor, not as marks on each target: none is left marked,
    // and the cursor is gone once the index took them all.
    const left = await runInDurableObject(rolloutStub(id), (_i, state) => ({
      marked: state.storage.sql.exec<{ n: number }>("SELECT COUNT(*) AS n FROM targets WHERE dirty > 0").one().n,
      cursor: state.storage.kv.get("index_from") ?? null,
    }));
    expect(left).toEqual({ marked: 0, cursor: null });
  });
});
