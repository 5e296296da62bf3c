import { desc, lt, and, eq, type SQL } from "drizzle-orm";
import type { Db } from "../db/client";
import { auditLog } from "../db/schema";

export interface AuditEntry {
  actor: string;
  action: string;
  target: string;
  details?: unknown;
}

/** The insert for one audit row, to put in the same batch as the mutation it records. */
export function auditInsert(db: Db, entry: AuditEntry, at = Date.now()) {
  return db.insert(auditLog).values({ at, ...entry, details: entry.details ?? null });
}

/** For mutations that commit in a Durable Object first: the audit row follows the commit. */
export async function audit(db: Db, entry: AuditEntry) {
  try {
    await auditInsert(db, entry);
  } catch (err) {
    console.error("audit write failed", entry, err);
  }
}

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
