/**
 * The cron's rollup of every fleet (src/scheduled.ts): on the first tick of each 5-minute period,
 * each fleet's figures are read in a few aggregates and compared with its last row; a row is
 * written only for a fleet whose figures changed or that rebooted or started a rollout, and rows
 * past 30 days are pruned in the same batch (and once a day). A quiet deployment's rollup writes
 * nothing: no row, no cursor, no deletion.
 */
import { getDb } from "../db/client";
import { SERVER_STATUSES } from "../domain/enums";
import type { Env } from "../env";
import { zeros } from "../status/counts";
import { fleetVersions, periodOf, pruneBefore, pruneDue, rollupDue, worthARow, type Figures } from "./rollup";
import { countEvents, readInputs, rolledPeriod, writeRollup } from "./store";

export interface RollupResult {
  fleets: number;
  written: number;
  /** Whether it marked its period rolled up (with rows or the audit cursor): not when quiet. */
  marked: boolean;
}

/**
 * The last period this isolate rolled up and found quiet: its later ticks here read nothing. Only
 * a saving: a tick in another isolate rolls the period up again, reads, and writes the same nothing.
 */
let quietPeriod: number | null = null;

/**
 * The cron's entry: a rollup on the first tick of each period, else nothing but the read of its
 * cursor (written in any batch that writes rows or moves the audit cursor), or nothing at all
 * after a quiet rollup in this isolate. A tick missed or late still rolls its period up.
 */
export async function rollupIfDue(env: Env, now: number): Promise<RollupResult | null> {
  if (periodOf(now) === quietPeriod) return null;
  if (!rollupDue(now, await rolledPeriod(getDb(env.DB)))) return null;
  const result = await rollupHistory(env, now);
  quietPeriod = result.marked ? null : periodOf(now);
  return result;
}

/** Rolls every fleet up for the period of `now`, due or not. */
export async function rollupHistory(env: Env, now: number): Promise<RollupResult> {
  const db = getDb(env.DB);
  const at = periodOf(now);
  const input = await readInputs(db, now);
  // Without a cursor (the first rollup ever) nothing before it is counted: it would all land in one period.
  const from = input.cursor ?? input.maxAuditId;
  const events = from < input.maxAuditId ? await countEvents(db, from, input.maxAuditId) : new Map();
  const ids = input.fleetRows.map((f) => f.id);
  const last = new Map(
    input.fleetRows
      .filter((f) => f.last !== null)
      .map((f) => [f.id, JSON.parse(f.last!) as Pick<Figures, "servers" | "versions">]),
  );

  const figures = new Map<string, Figures>();
  for (const id of ids) {
    const ev = events.get(id);
    figures.set(id, {
      servers: { total: 0, ...zeros(SERVER_STATUSES) },
      versions: {},
      reboots: ev?.reboots ?? 0,
      rollouts: ev?.rollouts ?? 0,
    });
  }
  for (const c of input.counts) {
    const f = figures.get(c.fleet);
    if (!f) continue;
    f.servers[c.status] = (f.servers[c.status] ?? 0) + Number(c.n);
    f.servers.total += Number(c.n);
  }
  const versionRows = new Map<string, { agent: string; version: string | null; n: number }[]>();
  for (const v of input.versions) {
    const list = versionRows.get(v.fleet) ?? [];
    list.push({ agent: v.agent, version: v.version, n: Number(v.n) });
    versionRows.set(v.fleet, list);
  }
  for (const [fleet, rows] of versionRows) {
    const f = figures.get(fleet);
    if (f) f.versions = fleetVersions(rows);
  }

  const rows = [...figures]
    .filter(([fleet, f]) => worthARow(last.get(fleet), f))
    .map(([fleet, f]) => ({ fleet, figures: f }));
  const cursor = { from: input.cursor, to: input.maxAuditId };
  const prune = pruneDue(now, rows.length > 0) ? pruneBefore(now) : null;
  const marked = await writeRollup(env.DB, rows, cursor, at, prune);
  return { fleets: ids.length, written: rows.length, marked };
}
