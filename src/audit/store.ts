import { and, desc, eq, lt, sql, type SQL } from "drizzle-orm";
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
