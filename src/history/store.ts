/**
 * The fleet history's D1 statements. The rollup reads every fleet's figures and its last row in a
 * constant number of statements (one batch; the audit count apart), and writes its rows (a
 * statement per 50 fleets), its cursors and the pruning in one batch: a crash before that batch
 * leaves nothing, after it everything. A Worker invocation's limit on statements is never near.
 */
import { and, asc, desc, eq, gte, inArray, lt, lte, sql } from "drizzle-orm";
import type { Db } from "../db/client";
import { agentInstances, auditLog, cronCursors, fleetHistory, fleets, servers } from "../db/schema";
import { statusAt } from "../model/server/staleness";
import type { Figures } from "./rollup";

/** The last audit row the rollup counted (its id, in `at`). */
const AUDIT_CURSOR = "history_audit";
/** Fleets' rows per INSERT: a statement's JSON stays far under D1's limits (a row is a few KB at most). */
const ROWS_PER_STATEMENT = 50;
/** The period the rollup last wrote for (its start, ms): a repeated first tick of it does nothing. */
const PERIOD_CURSOR = "history";

/** The period the rollup last wrote for, or null before any did: the one read a first tick costs. */
export async function rolledPeriod(db: Db): Promise<number | null> {
  const rows = await db.select({ at: cronCursors.at }).from(cronCursors).where(eq(cronCursors.name, PERIOD_CURSOR));
  return rows[0]?.at ?? null;
}

/** What the rollup reads: fleets, their servers by status, their agents' versions, the audit rows since the cursor. */
export async function readInputs(db: Db, now: number) {
  const [fleetRows, counts, versions, cursor, maxId] = await db.batch([
    // Every fleet with its newest row, one indexed LIMIT 1 read each, in one statement: the
    // rollup's statements stay a handful whatever the number of fleets.
    db
      .select({
        id: fleets.id,
        last: sql<
          string | null
        >`(SELECT json_object('servers', json(h.servers), 'versions', json(h.versions)) FROM ${fleetHistory} AS h WHERE h.fleet_id = ${fleets.id} ORDER BY h.at DESC LIMIT 1)`,
      })
      .from(fleets),
    // One aggregate over servers_fleet_state_status_idx for every fleet (the covering index).
    db
      .select({ fleet: servers.fleetId, status: statusAt(now), n: sql<number>`count(*)` })
      .from(servers)
      .where(sql`${servers.state} != 'removed'`)
      .groupBy(servers.fleetId, statusAt(now)),
    db
      .select({
        fleet: agentInstances.fleetId,
        agent: agentInstances.agent,
        version: agentInstances.reportedVersion,
        n: sql<number>`count(*)`,
      })
      .from(agentInstances)
      .groupBy(agentInstances.fleetId, agentInstances.agent, agentInstances.reportedVersion),
    db.select({ at: cronCursors.at }).from(cronCursors).where(eq(cronCursors.name, AUDIT_CURSOR)),
    db.select({ id: sql<number | null>`max(${auditLog.id})` }).from(auditLog),
  ]);
  return { fleetRows, counts, versions, cursor: cursor[0]?.at ?? null, maxAuditId: Number(maxId[0]?.id ?? 0) };
}

/**
 * Reboots (FleetLock grants to hosts: a rollout's own slot grants name the rollout as actor) and
 * rollouts started, per fleet, among the audit rows (after, upTo]. The rowid range reads only them.
 */
export async function countEvents(db: Db, after: number, upTo: number) {
  const rows = await db
    .select({
      action: auditLog.action,
      fleet: sql<
        string | null
      >`CASE WHEN ${auditLog.action} = 'rollout.start' THEN json_extract(${auditLog.details}, '$.fleet') WHEN ${auditLog.target} LIKE 'fleet:%' THEN substr(${auditLog.target}, 7) END`,
      n: sql<number>`count(*)`,
    })
    .from(auditLog)
    .where(
      and(
        sql`${auditLog.id} > ${after}`,
        lte(auditLog.id, upTo),
        inArray(auditLog.action, ["fleetlock.grant", "rollout.start"]),
        sql`${auditLog.actor} NOT LIKE 'rollout:%'`,
      ),
    )
    .groupBy(sql`1`, sql`2`);
  const out = new Map<string, { reboots: number; rollouts: number }>();
  for (const r of rows) {
    if (!r.fleet) continue;
    const c = out.get(r.fleet) ?? { reboots: 0, rollouts: 0 };
    if (r.action === "rollout.start") c.rollouts += Number(r.n);
    else c.reboots += Number(r.n);
    out.set(r.fleet, c);
  }
  return out;
}

/**
 * The rollup's one batch: the rows (each only while its fleet exists, so a fleet deleted meanwhile
 * gets none; a repeated tick's row for the same period is dropped), the audit cursor if it moved,
 * the period's cursor with either, and the pruning when asked (`cutoff`: rows past the retention,
 * but each fleet's newest of them: its state at the cutoff). Nothing to write sends nothing;
 * answers whether it marked the period rolled up.
 */
export async function writeRollup(
  d1: D1Database,
  rows: { fleet: string; figures: Figures }[],
  cursor: { from: number | null; to: number },
  period: number,
  cutoff: number | null,
) {
  // Raw statements (drizzle's batch takes its builders only): the rows as JSON, a chunk to a
  // statement (json_each), so a rollup is a few statements whatever the number of fleets.
  const insert = d1.prepare(
    `INSERT INTO fleet_history (fleet_id, at, servers, versions, reboots, rollouts)
     SELECT r.value ->> 'fleet', ?2, json(r.value -> 'servers'), json(r.value -> 'versions'), r.value ->> 'reboots', r.value ->> 'rollouts'
     FROM json_each(?1) AS r WHERE EXISTS (SELECT 1 FROM fleets WHERE id = r.value ->> 'fleet')
     ON CONFLICT (fleet_id, at) DO NOTHING`,
  );
  const stmts: D1PreparedStatement[] = [];
  for (let i = 0; i < rows.length; i += ROWS_PER_STATEMENT) {
    const chunk = rows.slice(i, i + ROWS_PER_STATEMENT).map((r) => ({ fleet: r.fleet, ...r.figures }));
    stmts.push(insert.bind(JSON.stringify(chunk), period));
  }
  const setCursor = d1.prepare(
    "INSERT INTO cron_cursors (name, at) VALUES (?1, ?2) ON CONFLICT (name) DO UPDATE SET at = excluded.at",
  );
  if (cursor.from !== cursor.to) stmts.push(setCursor.bind(AUDIT_CURSOR, cursor.to));
  const marked = stmts.length > 0;
  if (marked) stmts.push(setCursor.bind(PERIOD_CURSOR, period));
  if (cutoff !== null)
    stmts.push(
      d1
        .prepare(
          `DELETE FROM fleet_history WHERE at < ?1 AND EXISTS (
           SELECT 1 FROM fleet_history AS n WHERE n.fleet_id = fleet_history.fleet_id AND n.at > fleet_history.at AND n.at <= ?1)`,
        )
        .bind(cutoff),
    );
  if (stmts.length) await d1.batch(stmts);
  return marked;
}

export type HistoryRow = typeof fleetHistory.$inferSelect;

/** A fleet's rows of [since, until], and the newest before `since` (the state when the window opened). */
export async function readWindow(db: Db, fleet: string, since: number, until: number): Promise<HistoryRow[]> {
  const [before, within] = await db.batch([
    db
      .select()
      .from(fleetHistory)
      .where(and(eq(fleetHistory.fleetId, fleet), lt(fleetHistory.at, since)))
      .orderBy(desc(fleetHistory.at))
      .limit(1),
    db
      .select()
      .from(fleetHistory)
      .where(and(eq(fleetHistory.fleetId, fleet), gte(fleetHistory.at, since), lte(fleetHistory.at, until)))
      .orderBy(asc(fleetHistory.at)),
  ]);
  return [...before, ...within];
}
