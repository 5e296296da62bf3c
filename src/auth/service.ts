/**
 * Token revocation. Operator tokens live in D1 alone; a server token belongs to its server's
 * ledger, which forgets the hash first (the host is refused from that moment, a parked poll
 * included) and updates the D1 row and the audit log from its outbox.
 */
import { and, eq, isNull } from "drizzle-orm";
import { auditInsert } from "../audit/log";
import { getDb } from "../db/client";
import { tokens } from "../db/schema";
import type { Env } from "../env";
import { notFound } from "../http/errors";
import { ledgerOf } from "../objects/stubs";

export async function revokeToken(env: Env, actor: string, id: string) {
  const db = getDb(env.DB);
  const row = await db.query.tokens.findFirst({ where: eq(tokens.id, id) });
  if (!row) throw notFound("token", id);
  if (row.revokedAt != null) return row;
  if (row.kind === "server" && row.serverId) {
    await ledgerOf(env, row.serverId).revokeToken(actor);
    const after = await db.query.tokens.findFirst({ where: eq(tokens.id, id) });
    // The ledger has revoked it either way; D1 may lag if it refused the row just now.
    return after?.revokedAt != null ? after : { ...row, revokedAt: Date.now() };
  }
  const revokedAt = Date.now();
  await db.batch([
    db.update(tokens).set({ revokedAt }).where(and(eq(tokens.id, id), isNull(tokens.revokedAt))),
    auditInsert(db, { actor, action: "token.revoke", target: `token:${id}` }),
  ]);
  return { ...row, revokedAt };
}
