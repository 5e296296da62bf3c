import { and, asc, eq, gt, inArray, isNull, or, sql, type SQL } from "drizzle-orm";
import type { Db } from "../db/client";
import { fleetSsoMappings, servers, ssoMappings, tokens } from "../db/schema";
import type { TokenKind } from "../domain/enums";
import { MAX_SSO_MAPPINGS } from "../domain/limits";
import { BOOTSTRAP_ID } from "../domain/principal";

export type TokenRow = typeof tokens.$inferSelect;

export const tokenById = (db: Db, id: string) => db.query.tokens.findFirst({ where: eq(tokens.id, id) });

/** The unrevoked token a bearer names: an operator token by its id, a server's by its server id. */
export const liveTokenOf = (db: Db, parsed: { kind: TokenKind; id: string }) =>
  db.query.tokens.findFirst({
    where:
      parsed.kind === "operator"
        ? and(eq(tokens.id, parsed.id), eq(tokens.kind, "operator"), isNull(tokens.revokedAt))
        : and(eq(tokens.serverId, parsed.id), eq(tokens.kind, "server"), isNull(tokens.revokedAt)),
  });

/**
 * The tokens a token limited to `visible` fleets may see: operator tokens whose fleets are all
 * among them ("*" tokens never), and the tokens of servers of those fleets.
 */
function tokensWithin(visible: readonly string[] | null): SQL | undefined {
  if (visible === null) return undefined;
  const names = sql`(SELECT value FROM json_each(${JSON.stringify(visible)}))`;
  return sql`(
    (${tokens.kind} = 'operator' AND json_type(${tokens.fleets}) = 'array'
      AND NOT EXISTS (SELECT 1 FROM json_each(${tokens.fleets}) AS f WHERE f.value NOT IN ${names}))
    OR (${tokens.kind} = 'server'
      AND EXISTS (SELECT 1 FROM ${servers} WHERE ${servers.id} = ${tokens.serverId} AND ${servers.fleetId} IN ${names}))
  )`;
}

/** One token, if `visible` may see it (a plain select: tokensWithin names two tables). */
export async function tokenWithin(db: Db, id: string, visible: readonly string[] | null) {
  const [row] = await db
    .select()
    .from(tokens)
    .where(and(eq(tokens.id, id), tokensWithin(visible)))
    .limit(1);
  return row;
}

/** A page of tokens by id (one more row than `limit` when another page exists). */
export const listTokens = (
  db: Db,
  visible: readonly string[] | null,
  kind: TokenKind | undefined,
  after: string | null,
  limit: number,
) =>
  db
    .select()
    .from(tokens)
    .where(
      and(tokensWithin(visible), kind ? eq(tokens.kind, kind) : undefined, after ? gt(tokens.id, after) : undefined),
    )
    .orderBy(asc(tokens.id))
    .limit(limit + 1);

const TOKEN = "token:";

/**
 * The names of the operator tokens among these actors (`token:<id>` → its name), so an answer says
 * who acted, not only a uuid; one read for any number of actors.
 */
export async function tokenActorNames(db: Db, actors: string[]): Promise<Map<string, string>> {
  const ids = [...new Set(actors.filter((a) => a.startsWith(TOKEN)).map((a) => a.slice(TOKEN.length)))];
  const out = new Map<string, string>();
  if (ids.includes(BOOTSTRAP_ID)) out.set(TOKEN + BOOTSTRAP_ID, "ADMIN_TOKEN");
  const uuids = ids.filter((id) => id !== BOOTSTRAP_ID);
  if (uuids.length === 0) return out;
  const rows = await db
    .select({ id: tokens.id, name: tokens.name })
    .from(tokens)
    .where(inArray(tokens.id, sql`(SELECT value FROM json_each(${JSON.stringify(uuids)}))`));
  for (const r of rows) out.set(TOKEN + r.id, r.name);
  return out;
}

/** The SSO mappings (src/sso/ manages them), as every sign-in reads them. */
export const allMappings = (db: Db) =>
  db.select().from(ssoMappings).orderBy(asc(ssoMappings.kind), asc(ssoMappings.value)).limit(MAX_SSO_MAPPINGS);

/**
 * Every mapping that could name the identity: all of D1's (at most MAX_SSO_MAPPINGS) and the fleet
 * specs' rows naming its email or one of its groups (by the (kind, value) index), in one batch.
 */
export async function mappingsFor(db: Db, who: { email: string | null; groups: readonly string[] }) {
  const names = or(
    who.email === null ? undefined : and(eq(fleetSsoMappings.kind, "email"), eq(fleetSsoMappings.value, who.email)),
    // Groups as one JSON parameter: a user may be in more groups than D1 binds parameters.
    and(
      eq(fleetSsoMappings.kind, "group"),
      inArray(fleetSsoMappings.value, sql`(SELECT value FROM json_each(${JSON.stringify(who.groups)}))`),
    ),
  );
  const [all, ofFleets] = await db.batch([
    allMappings(db),
    db.select().from(fleetSsoMappings).where(names).limit(MAX_FLEET_ROWS_READ),
  ]);
  return { all, ofFleets };
}

/** More spec rows naming one user than this is a directory pasted into specs; the rest are not read. */
const MAX_FLEET_ROWS_READ = 1000;
