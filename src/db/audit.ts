/** The audit rows every owner writes with its own change (read back by src/audit/). */
import type { SQL } from "drizzle-orm";
import type { Db } from "./client";
import { insertWhere } from "./insert-where";
import { auditLog } from "./schema";

export interface AuditEntry {
  actor: string;
  action: string;
  target: string;
  details?: unknown;
}

/** An audit row that leaves a Durable Object's outbox: its id makes a redelivery a no-op. */
export interface AuditEvent extends AuditEntry {
  event_id: string;
  at: number;
}

/** The insert for one audit row, to put in the same batch as the mutation it records. */
export function auditInsert(db: Db, entry: AuditEntry, at = Date.now()) {
  return db.insert(auditLog).values({ at, ...entry, details: entry.details ?? null });
}

/**
 * The insert for one audit row written only while `when` holds, judged in the batch's transaction:
 * put before the conditional change it records (`when` being that change's own condition), so of
 * concurrent callers only the one whose change happens writes the row.
 */
export function auditInsertIf(db: Db, entry: AuditEntry, when: SQL, at = Date.now()) {
  // By column name (the id is the next rowid, event_id null), never by position.
  const { actor, action, target } = entry;
  return insertWhere(db, auditLog, { at, actor, action, target, details: entry.details ?? null }, when);
}

const auditRowOf = (e: AuditEvent) => ({
  at: e.at,
  actor: e.actor,
  action: e.action,
  target: e.target,
  details: e.details ?? null,
  eventId: e.event_id,
});

/** An outbox audit row: inserted once, whatever the number of deliveries. */
export function auditInsertOnce(db: Db, e: AuditEvent) {
  return db.insert(auditLog).values(auditRowOf(e)).onConflictDoNothing({ target: auditLog.eventId });
}

/** Six bound parameters a row: 16 rows stay within D1's 100 a statement. */
export const AUDIT_ROWS_PER_INSERT = 16;

/** Outbox audit rows, many to a statement: each inserted once, whatever the number of deliveries. */
export function auditInsertManyOnce(db: Db, events: AuditEvent[]) {
  const out = [];
  for (let i = 0; i < events.length; i += AUDIT_ROWS_PER_INSERT)
    out.push(
      db
        .insert(auditLog)
        .values(events.slice(i, i + AUDIT_ROWS_PER_INSERT).map(auditRowOf))
        .onConflictDoNothing({ target: auditLog.eventId }),
    );
  return out;
}

/** For an object's outbox: an audit event with a fresh idempotency key. */
export const auditEvent = (entry: AuditEntry, at = Date.now()): AuditEvent => ({
  ...entry,
  at,
  event_id: crypto.randomUUID(),
});
