import { and, desc, eq, lt, type SQL } from "drizzle-orm";
import type { Db } from "../db/client";
import { auditLog } from "../db/schema";

export async function listAudit(db: Db, opts: { target?: string; before?: number; limit: number }) {
  const conds: SQL[] = [];
  if (opts.target) conds.push(eq(auditLog.target, opts.target));
  if (opts.before) conds.push(lt(auditLog.id, opts.before));
  return db
    .select()
    .from(auditLog)
    .where(conds.length ? and(...conds) : undefined)
    .orderBy(desc(auditLog.id))
    .limit(opts.limit + 1);
}
