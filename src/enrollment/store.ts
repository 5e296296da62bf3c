/**
 * Enrollment's D1 rows: the tokens, and one enrollment per (token, machine). A use is counted by
 * one conditional UPDATE (… WHERE uses < max_uses … RETURNING) in the same batch (one
 * transaction) as the enrollment row it pays for, so racing enrollments never count past
 * max_uses, and a use is never spent without its row nor a row written without its use.
 */
import { and, asc, eq, gt, gte, isNull, sql } from "drizzle-orm";
import { auditInsert, auditInsertIf, type AuditEntry } from "../db/audit";
import type { Db } from "../db/client";
import { isUniqueViolation } from "../db/errors";
import { enrollments, enrollmentTokens } from "../db/schema";

export type EnrollmentTokenRow = typeof enrollmentTokens.$inferSelect;

export const enrollmentTokenById = (db: Db, id: string) =>
  db.query.enrollmentTokens.findFirst({ where: eq(enrollmentTokens.id, id) });

/**
 * The token with its audit row; false when its creator's Idempotency-Key is already on another
 * row (a concurrent create with the same key committed first: nothing of this one was written).
 */
export async function insertEnrollmentToken(db: Db, row: EnrollmentTokenRow, entry: AuditEntry) {
  try {
    await db.batch([db.insert(enrollmentTokens).values(row), auditInsert(db, entry, row.createdAt)]);
    return true;
  } catch (err) {
    if (row.idempotencyKey !== null && isUniqueViolation(err)) return false;
    throw err;
  }
}

/** The token a creator made with this Idempotency-Key. */
export const enrollmentTokenByKey = (db: Db, createdBy: string, key: string) =>
  db.query.enrollmentTokens.findFirst({
    where: and(eq(enrollmentTokens.createdBy, createdBy), eq(enrollmentTokens.idempotencyKey, key)),
  });

/**
 * The token's secret issued again (its new hash stored, the old secret refused from now on), with
 * its audit row, in one transaction: only over the hash the caller read (of two retries at once,
 * one reissues), and only while no machine has presented it and it is neither revoked nor
 * expired (someone holds that secret, or it is of no use). The row as it is then, or undefined
 * when it was not.
 */
export async function reissueSecret(db: Db, row: EnrollmentTokenRow, hash: string, entry: AuditEntry, at: number) {
  const open = and(
    eq(enrollmentTokens.id, row.id),
    eq(enrollmentTokens.hash, row.hash),
    // A use given back (a refused registration) still leaves last_used_at: someone holds it.
    isNull(enrollmentTokens.lastUsedAt),
    isNull(enrollmentTokens.revokedAt),
    gt(enrollmentTokens.expiresAt, at),
  );
  const [, updated] = await db.batch([
    auditInsertIf(db, entry, sql`EXISTS (SELECT 1 FROM ${enrollmentTokens} WHERE ${open})`, at),
    db.update(enrollmentTokens).set({ hash }).where(open).returning(),
  ]);
  return updated[0];
}

/** A page of a fleet's tokens by id (one more row than `limit` when another page exists). */
/** The fleet's tokens created since `since` (the fleet's creation: a deleted fleet's tokens are not the new one's). */
export const listEnrollmentTokens = (db: Db, fleet: string, since: number, after: string | null, limit: number) =>
  db
    .select()
    .from(enrollmentTokens)
    .where(
      and(
        eq(enrollmentTokens.fleetId, fleet),
        gte(enrollmentTokens.createdAt, since),
        after ? gt(enrollmentTokens.id, after) : undefined,
      ),
    )
    .orderBy(asc(enrollmentTokens.id))
    .limit(limit + 1);

/** Revokes the token (once: a second revocation writes nothing) with its audit row. */
export async function revokeEnrollmentToken(db: Db, id: string, at: number, entry: AuditEntry) {
  await db.batch([
    db
      .update(enrollmentTokens)
      .set({ revokedAt: at })
      .where(and(eq(enrollmentTokens.id, id), sql`${enrollmentTokens.revokedAt} IS NULL`)),
    auditInsert(db, entry, at),
  ]);
}

export const enrollmentOf = (db: Db, tokenId: string, machineId: string) =>
  db.query.enrollments.findFirst({
    where: and(eq(enrollments.tokenId, tokenId), eq(enrollments.machineId, machineId)),
  });

export interface Claim {
  tokenId: string;
  machineId: string;
  serverId: string;
  hostname: string;
  now: number;
  /** The secret's hash the caller checked: a reissue committed since then makes the claim fail. */
  hash: string;
}

/** This claim's own row exists: `server_id` is fresh per attempt, so only the attempt that wrote it sees it. */
const CLAIM_ROW_EXISTS =
  "EXISTS (SELECT 1 FROM enrollments WHERE token_id = ?1 AND machine_id = ?2 AND server_id = ?3)";

/**
 * Spends one use of a live token on this machine, recording the server id it will be registered
 * under: true when this call did. False when the token is used up, revoked or expired, its secret
 * was issued again since the caller checked it, or another enrollment of the same machine got
 * there first (the caller reads that one's row). Raw D1
 * statements: drizzle's batch takes no INSERT … SELECT … ON CONFLICT nor UPDATE … RETURNING of this shape.
 */
export async function claimUse(db: Db, c: Claim): Promise<boolean> {
  const d1 = db.$client;
  const args = [c.tokenId, c.machineId, c.serverId, c.hostname, c.now, c.hash] as const;
  const [, counted] = await d1.batch([
    d1
      .prepare(
        `INSERT INTO enrollments (token_id, machine_id, server_id, hostname, created_at)
         SELECT id, ?2, ?3, ?4, ?5 FROM enrollment_tokens
         WHERE id = ?1 AND hash = ?6 AND revoked_at IS NULL AND expires_at > ?5 AND uses < max_uses
         ON CONFLICT (token_id, machine_id) DO NOTHING`,
      )
      .bind(...args),
    d1
      .prepare(
        `UPDATE enrollment_tokens SET uses = uses + 1, last_used_at = ?5 WHERE id = ?1 AND hash = ?6 AND uses < max_uses AND ${CLAIM_ROW_EXISTS} RETURNING uses`,
      )
      .bind(...args),
  ]);
  return counted.results.length === 1;
}

/**
 * Gives back the use of a claim whose registration was refused before any server was committed
 * (the hostname was taken, say), with its enrollment row: nothing is left of the attempt. The
 * same shape as the claim, so a repeated release gives nothing back twice.
 */
export async function releaseUse(db: Db, c: Claim) {
  const d1 = db.$client;
  const args = [c.tokenId, c.machineId, c.serverId] as const;
  await d1.batch([
    d1
      .prepare(`UPDATE enrollment_tokens SET uses = uses - 1 WHERE id = ?1 AND uses > 0 AND ${CLAIM_ROW_EXISTS}`)
      .bind(...args),
    d1.prepare("DELETE FROM enrollments WHERE token_id = ?1 AND machine_id = ?2 AND server_id = ?3").bind(...args),
  ]);
}

export const insertAudit = (db: Db, entry: AuditEntry) => auditInsert(db, entry);
