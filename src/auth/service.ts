/**
 * Operator tokens: created and revoked here, in D1 alone, each with its audit row. A server token
 * belongs to its server's ledger, which forgets the hash first on revocation (the host is refused
 * from that moment, a parked poll included) and updates the D1 row and the audit log from its outbox.
 */
import { and, eq, isNull, sql } from "drizzle-orm";
import { auditInsert, auditInsertIf } from "../db/audit";
import { getDb } from "../db/client";
import { tokens } from "../db/schema";
import type { TokenKind } from "../domain/enums";
import { actorOf, visibleFleets, type OperatorPrincipal, type Principal } from "../domain/principal";
import { iso } from "../lib/time";
import type { Env } from "../env";
import { notFound } from "../domain/errors";
import { ledgerOf } from "../objects/stubs";
import { closeLiveSockets } from "../notices/sessions";
import { listTokens, tokenById, tokenWithin, type TokenRow } from "./store";
import { grantFor } from "./grants";
import type { TokenInput } from "./schemas";
import { issueToken } from "./tokens";

/** A new operator token; its secret is answered here only, its hash is what D1 keeps. */
export async function createOperatorToken(env: Env, creator: OperatorPrincipal, input: TokenInput) {
  const db = getDb(env.DB);
  const now = Date.now();
  const grant = grantFor(creator, input, now);
  const actor = actorOf(creator);
  const id = crypto.randomUUID();
  const { token, hash } = await issueToken("operator", id);
  const row: TokenRow = {
    id,
    kind: "operator",
    scope: grant.scope,
    serverId: null,
    name: input.name,
    hash,
    createdBy: actor,
    createdAt: now,
    revokedAt: null,
    fleets: grant.fleets,
    description: input.description ?? null,
    expiresAt: grant.expiresAt,
  };
  const details = {
    name: input.name,
    scope: grant.scope,
    fleets: grant.fleets,
    ...(row.description !== null ? { description: row.description } : {}),
    ...(grant.expiresAt !== null ? { expires_at: iso(grant.expiresAt) } : {}),
  };
  await db.batch([
    db.insert(tokens).values(row),
    auditInsert(db, { actor, action: "token.create", target: `token:${id}`, details }),
  ]);
  return { row, token };
}

export const searchTokens = (
  env: Env,
  principal: Principal,
  kind: TokenKind | undefined,
  after: string | null,
  limit: number,
) => listTokens(getDb(env.DB), visibleFleets(principal), kind, after, limit);

/** A token the principal may see (every fleet it names is one of the principal's), else not found. */
export async function tokenOf(env: Env, principal: Principal, id: string) {
  const row = await tokenWithin(getDb(env.DB), id, visibleFleets(principal));
  if (!row) throw notFound("token", id);
  return row;
}

export async function revokeToken(env: Env, principal: Principal, id: string) {
  const db = getDb(env.DB);
  const actor = actorOf(principal);
  const row = await tokenOf(env, principal, id);
  // A server token is always its ledger's to answer: D1's row may still show a revocation from
  // before a rotation it has not taken yet, while the rotated token works.
  if (row.kind === "server" && row.serverId) {
    const revoked = await ledgerOf(env, row.serverId).revokeToken(actor);
    const after = (await tokenById(db, id)) ?? row;
    // The ledger owns the revocation and answers its time: D1's row is its copy, which lags while
    // D1 refuses it, so two revokes then agree only on the ledger's. Only a revocation by older
    // code (no time kept) whose row D1 has not taken yet falls back to the present.
    return { ...after, revokedAt: revoked?.revoked_at ?? after.revokedAt ?? Date.now() };
  }
  if (row.revokedAt != null) return row;
  const revokedAt = Date.now();
  const unrevoked = and(eq(tokens.id, id), isNull(tokens.revokedAt));
  // Of concurrent revocations, only the one whose update revokes writes the audit row: it is
  // inserted while the token is still unrevoked, in the update's own transaction. The row is read
  // back in that transaction too, so a call that lost the race answers the winner's revocation
  // as it was committed, never a time of its own.
  const [, revoked, [after]] = await db.batch([
    auditInsertIf(
      db,
      { actor, action: "token.revoke", target: `token:${id}` },
      sql`EXISTS (SELECT 1 FROM ${tokens} WHERE ${unrevoked})`,
      revokedAt,
    ),
    db.update(tokens).set({ revokedAt }).where(unrevoked).returning({ id: tokens.id }),
    db.select().from(tokens).where(eq(tokens.id, id)),
  ]);
  if (!after) throw notFound("token", id);
  if (revoked.length === 0) return after;
  // Its console sessions are refused from now on; their open pages' live sockets close now too.
  await closeLiveSockets(env, { token: id }, "token revoked", row.fleets ?? "*");
  return after;
}
