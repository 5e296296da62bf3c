/** The audit rows every owner writes with its own change (read back by src/audit/). */
import type { Db } from "./client";
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

/** An outbox audit row: inserted once, whatever the number of deliveries. */
export function auditInsertOnce(db: Db, e: AuditEvent) {
  return db
    .insert(auditLog)
    .values({
      at: e.at,
      actor: e.actor,
      action: e.action,
      target: e.target,
      details: e.details ?? null,
      eventId: e.event_id,
    })
    .onConflictDoNothing({ target: auditLog.eventId });
}

/** For an object's outbox: an audit event with a fresh idempotency key. */
export const auditEvent = (entry: AuditEntry, at = Date.now()): AuditEvent => ({
  ...entry,
  at,
  event_id: crypto.randomUUID(),
});
