/**
 * SSO: the mapping from identities to access, and the sessions minted for signed-in users. A
 * session is an operator token with an expiry, its scope and fleets from the mapping, so the API,
 * the console and `hm` authenticate it exactly as any token, and ending one is revoking it.
 */
import { eq, sql } from "drizzle-orm";
import type { BatchItem } from "drizzle-orm/batch";
import { auditInsert, auditInsertIf } from "../db/audit";
import { insertWhere } from "../db/insert-where";
import { grantFor as grantWithin } from "../auth/grants";
import { revokeToken } from "../auth/service";
import { issueToken } from "../auth/tokens";
import { getDb } from "../db/client";
import { ssoMappings, ssoSessions, tokens } from "../db/schema";
import { DomainError, notFound } from "../domain/errors";
import type { Env } from "../env";
import type { Scope } from "../domain/enums";
import { actorOf, type Principal } from "../domain/principal";
import { isUniqueViolation } from "../db/errors";
import { fleetsWithin, normalEmail, PROVIDER_NAMES, type Identity, type SsoGrant } from "../auth/sso-mapping";
import { allMappings } from "../auth/store";
import { MAX_SSO_MAPPINGS } from "../domain/limits";
import type { SsoMappingInput } from "./schemas";
import { liveSessions, mappingById, sessionByToken, specMappings, type SsoMappingRow } from "./store";

/** The longest an SSO session lives, whatever the provider says: a laptop's token, a console tab. */
const SSO_SESSION_TTL_MS = { console: 8 * 3600_000, cli: 12 * 3600_000 } as const;

/** The mappings the admin may see: those within its own fleets (a fleet-limited admin sees none of "*"). */
export const listMappings = async (env: Env, principal: Principal) =>
  (await allMappings(getDb(env.DB))).filter((m) => fleetsWithin(m.fleets, principal));

/** The fleet specs' access rows the admin may see: those of its own fleets. */
export const listSpecMappings = async (env: Env, principal: Principal) =>
  principal.kind !== "operator"
    ? []
    : await specMappings(getDb(env.DB), principal.fleets === "*" ? null : principal.fleets);

/**
 * A mapping is a grant: an admin limited to some fleets may map users only to those fleets and at
 * most its own scope, as for the tokens it creates, or it could sign itself in as more than it is.
 */
export async function createMapping(env: Env, principal: Principal, input: SsoMappingInput): Promise<SsoMappingRow> {
  if (principal.kind !== "operator") throw new DomainError("forbidden", "only an operator manages SSO mappings");
  grantWithin(principal, { scope: input.scope, fleets: input.fleets }, Date.now());
  const actor = actorOf(principal);
  const db = getDb(env.DB);
  const row: SsoMappingRow = {
    id: crypto.randomUUID(),
    kind: input.kind,
    value: input.kind === "email" ? normalEmail(input.value) : input.value,
    scope: input.scope,
    fleets: input.fleets,
    description: input.description ?? null,
    createdBy: actor,
    createdAt: Date.now(),
  };
  // The cap is judged in the batch itself: a count read before it lets creates racing for the
  // last place all in, and a sign-in reads only the first MAX_SSO_MAPPINGS (the rest would be
  // silently ignored). The audit row goes first, under the same condition, so it exists only
  // when the mapping does.
  const room = sql`(SELECT count(*) FROM ${ssoMappings}) < ${MAX_SSO_MAPPINGS}`;
  let inserted: { id: string }[];
  try {
    [, inserted] = await db.batch([
      auditInsertIf(
        db,
        {
          actor,
          action: "sso.mapping.create",
          target: `sso-mapping:${row.id}`,
          details: { kind: row.kind, value: row.value, scope: row.scope, fleets: row.fleets },
        },
        room,
      ),
      insertWhere(db, ssoMappings, row, room).returning({ id: ssoMappings.id }),
    ]);
  } catch (err) {
    if (isUniqueViolation(err)) {
      throw new DomainError("already_exists", `a mapping for ${row.kind} '${row.value}' exists; delete it first`);
    }
    throw err;
  }
  if (inserted.length === 0)
    throw new DomainError("validation_failed", `at most ${MAX_SSO_MAPPINGS} SSO mappings; map groups, not people`);
  return row;
}

export async function deleteMapping(env: Env, principal: Principal, id: string) {
  const actor = actorOf(principal);
  const db = getDb(env.DB);
  const row = await mappingById(db, id);
  // One outside the admin's fleets is answered as a missing one: its existence is not confirmed.
  if (!row || !fleetsWithin(row.fleets, principal)) throw notFound("sso mapping", id);
  await db.batch([
    db.delete(ssoMappings).where(eq(ssoMappings.id, id)),
    auditInsert(db, {
      actor,
      action: "sso.mapping.delete",
      target: `sso-mapping:${id}`,
      details: { kind: row.kind, value: row.value },
    }),
  ]);
  return row;
}

/** The rows a minted token is held by (the console's session), written in the mint's own batch. */
export type HolderWrites = (token: {
  id: string;
  scope: Scope;
  secret: string;
  expiresAt: number;
}) => Promise<BatchItem<"sqlite">[]>;

/**
 * A session for a signed-in user: a new operator token expiring at `expiresAt` (at most the
 * client's TTL from now), its `sso_sessions` row, the audit row and the rows of what holds the
 * token (`heldBy`: the console's session), in one batch: a token nothing holds is never listed.
 */
export async function mintSession(
  env: Env,
  who: Identity,
  grant: SsoGrant,
  client: "console" | "cli",
  opts: { providerExpiresAt?: number; heldBy?: HolderWrites } = {},
) {
  const db = getDb(env.DB);
  const now = Date.now();
  const expiresAt = Math.min(now + SSO_SESSION_TTL_MS[client], opts.providerExpiresAt ?? Number.POSITIVE_INFINITY);
  const id = crypto.randomUUID();
  const { token, hash } = await issueToken("operator", id);
  const user = who.email ?? who.subject;
  const actor = `${who.provider}:${user}`;
  await db.batch([
    db.insert(tokens).values({
      id,
      kind: "operator",
      scope: grant.scope,
      serverId: null,
      name: `sso:${user}`.slice(0, 200),
      hash,
      createdBy: actor,
      createdAt: now,
      revokedAt: null,
      fleets: grant.fleets,
      description: `${user} signed in through ${PROVIDER_NAMES[who.provider]} (${client})`.slice(0, 500),
      expiresAt,
    }),
    db.insert(ssoSessions).values({
      tokenId: id,
      provider: who.provider,
      subject: who.subject,
      email: who.email,
      client,
      createdAt: now,
      expiresAt,
    }),
    auditInsert(db, {
      actor,
      action: "sso.sign_in",
      target: `token:${id}`,
      details: {
        provider: who.provider,
        client,
        scope: grant.scope,
        fleets: grant.fleets,
        groups: who.groups.slice(0, 20),
      },
    }),
    ...(opts.heldBy ? await opts.heldBy({ id, scope: grant.scope, secret: token, expiresAt }) : []),
  ]);
  return { id, token, scope: grant.scope, fleets: grant.fleets, expiresAt };
}

/** The live sessions the admin may see: those whose fleets lie within its own (as for mappings). */
export const activeSessions = async (env: Env, principal: Principal, limit: number) =>
  principal.kind !== "operator"
    ? []
    : await liveSessions(getDb(env.DB), Date.now(), limit, principal.fleets === "*" ? null : principal.fleets);

/** Ends a session: its token is revoked, so its console sessions and live sockets close too. */
export async function endSsoSession(env: Env, principal: Principal, tokenId: string) {
  const db = getDb(env.DB);
  const session = await sessionByToken(db, tokenId);
  if (!session) throw notFound("sso session", tokenId);
  const token = await revokeToken(env, principal, tokenId);
  return { session, token };
}
