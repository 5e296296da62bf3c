import { and, asc, desc, eq, gt, gte, inArray, lt, lte, max, min, sql, type SQL } from "drizzle-orm";
import type { Db } from "../db/client";
import { auditLog, enrollmentTokens, rollouts, servers, tokens } from "../db/schema";

/**
 * The rows a token limited to `visible` fleets may read, judged by the fleet of their target: a
 * fleet, a server, a rollout or an enrollment token of one of them, or an operator token whose
 * fleets are all among them. Deployment-wide rows (images, builds, upgrades) are left to "*" tokens.
 */
function auditRowsOf(visible: readonly string[]): SQL {
  const names = sql`(SELECT value FROM json_each(${JSON.stringify(visible)}))`;
  const after = (prefix: string) => sql`substr(${auditLog.target}, ${prefix.length + 1})`;
  const startsWith = (prefix: string) => sql`substr(${auditLog.target}, 1, ${prefix.length}) = ${prefix}`;
  return sql`(
    (${startsWith("fleet:")} AND ${after("fleet:")} IN ${names})
    OR (${startsWith("server:")} AND EXISTS (SELECT 1 FROM ${servers} WHERE ${servers.id} = ${after("server:")} AND ${servers.fleetId} IN ${names}))
    OR (${startsWith("rollout:")} AND EXISTS (SELECT 1 FROM ${rollouts} WHERE ${rollouts.id} = ${after("rollout:")} AND ${rollouts.fleetId} IN ${names}))
    OR (${startsWith("enrollment-token:")} AND EXISTS (SELECT 1 FROM ${enrollmentTokens} WHERE ${enrollmentTokens.id} = ${after("enrollment-token:")} AND ${enrollmentTokens.fleetId} IN ${names}))
    OR (${startsWith("token:")} AND EXISTS (SELECT 1 FROM ${tokens} WHERE ${tokens.id} = ${after("token:")}
        AND json_type(${tokens.fleets}) = 'array'
        AND NOT EXISTS (SELECT 1 FROM json_each(${tokens.fleets}) AS f WHERE f.value NOT IN ${names})))
  )`;
}

export async function listAudit(
  db: Db,
  opts: { target?: string; before?: number; limit: number; visible?: readonly string[] | null },
) {
  const conds: SQL[] = [];
  if (opts.visible) conds.push(auditRowsOf(opts.visible));
  if (opts.target) conds.push(eq(auditLog.target, opts.target));
  if (opts.before) conds.push(lt(auditLog.id, opts.before));
  return db
    .select()
    .from(auditLog)
    .where(conds.length ? and(...conds) : undefined)
    .orderBy(desc(auditLog.id))
    .limit(opts.limit + 1);
}

/** Rows after id `after`, oldest first: the export's page (ids only grow, so a cursor resumes exactly). */
export function auditAfter(
  db: Db,
  opts: { after: number; upTo?: number; limit: number; visible?: readonly string[] | null },
) {
  const conds: SQL[] = [gt(auditLog.id, opts.after)];
  if (opts.upTo !== undefined) conds.push(lte(auditLog.id, opts.upTo));
  if (opts.visible) conds.push(auditRowsOf(opts.visible));
  return db
    .select()
    .from(auditLog)
    .where(and(...conds))
    .orderBy(asc(auditLog.id))
    .limit(opts.limit);
}

/** Where an export from `since` starts: before the first row dated then or later (else after the last row). */
export async function idBefore(db: Db, since: number): Promise<number> {
  const [r] = await db
    .select({ first: min(auditLog.id), last: max(auditLog.id) })
    .from(auditLog)
    .where(gte(auditLog.at, since));
  if (r?.first != null) return r.first - 1;
  const [all] = await db.select({ last: max(auditLog.id) }).from(auditLog);
  return all?.last ?? 0;
}

/** The highest id of a row dated before `end`, and the date of the oldest row. */
export async function cutPoint(db: Db, end: number) {
  const [[before], [first]] = await db.batch([
    db
      .select({ id: max(auditLog.id) })
      .from(auditLog)
      .where(lt(auditLog.at, end)),
    db.select({ at: min(auditLog.at) }).from(auditLog),
  ]);
  return { lastId: before?.id ?? null, firstAt: first?.at ?? null };
}

/**
 * The rows retention may delete: older than `before` AND already in a day file (id up to
 * `exportedUpTo`), so a row not yet in R2 is never pruned. Walked in `at` order on
 * audit_log_at_idx, which holds both columns (the rowid is the id): the walk starts at the oldest
 * row and stops at `before` or at its limit, never reading a retained row but the few late ones
 * (dated long ago, not yet in a file).
 */
const prunable = (db: Db, opts: { exportedUpTo: number; before: number }, limit: number) =>
  db
    .select({ id: auditLog.id })
    .from(auditLog)
    .where(and(lt(auditLog.at, opts.before), lte(auditLog.id, opts.exportedUpTo)))
    .orderBy(asc(auditLog.at))
    .limit(limit);

/** Whether any row is due for retention: one probe of the index, whatever the table's size. */
export async function pruneDue(db: Db, opts: { exportedUpTo: number; before: number }) {
  return (await prunable(db, opts, 1)).length > 0;
}

/** Retention: deletes up to `limit` of the oldest prunable rows (see `prunable`). Returns how many went. */
export async function pruneAudit(db: Db, opts: { exportedUpTo: number; before: number; limit: number }) {
  const gone = await db
    .delete(auditLog)
    .where(inArray(auditLog.id, prunable(db, opts, opts.limit)))
    .run();
  return gone.meta.changes;
}

export async function maxAuditId(db: Db): Promise<number> {
  const [r] = await db.select({ id: max(auditLog.id) }).from(auditLog);
  return r?.id ?? 0;
}
