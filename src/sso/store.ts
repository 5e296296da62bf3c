import { and, asc, desc, eq, gt, inArray, isNull, sql } from "drizzle-orm";
import type { Db } from "../db/client";
import type { Scope } from "../domain/enums";
import { fleetSsoMappings, ssoMappings, ssoSessions, tokens } from "../db/schema";

export type SsoMappingRow = typeof ssoMappings.$inferSelect;

export const mappingById = (db: Db, id: string) => db.query.ssoMappings.findFirst({ where: eq(ssoMappings.id, id) });

/**
 * A session token's fleets lie within `own`: a list (never "*"), every name of which is in `own`.
 * In SQL, before the LIMIT, so an admin limited to some fleets gets full pages of its own sessions.
 */
const fleetsWithinSql = (own: readonly string[]) =>
  sql`(json_type(${tokens.fleets}) = 'array' AND NOT EXISTS (SELECT 1 FROM json_each(${tokens.fleets}) AS f
       WHERE f.value NOT IN (SELECT value FROM json_each(${JSON.stringify(own)}))))`;

/**
 * Sessions whose token is neither revoked nor expired, newest first; `within`: only those whose
 * fleets lie within these (null: every session).
 */
export const liveSessions = (db: Db, now: number, limit: number, within: readonly string[] | null) =>
  db
    .select({ s: ssoSessions, scope: tokens.scope, fleets: tokens.fleets })
    .from(ssoSessions)
    .innerJoin(tokens, eq(tokens.id, ssoSessions.tokenId))
    .where(and(gt(ssoSessions.expiresAt, now), isNull(tokens.revokedAt), within ? fleetsWithinSql(within) : undefined))
    .orderBy(desc(ssoSessions.createdAt), desc(ssoSessions.tokenId))
    .limit(limit);

export const sessionByToken = (db: Db, tokenId: string) =>
  db.query.ssoSessions.findFirst({ where: eq(ssoSessions.tokenId, tokenId) });

/** Spec rows listed at most: 100 per fleet's spec, so the first ten fleets' whole; more is a directory. */
const SPEC_MAPPINGS_SHOWN = 1000;

/** The fleet specs' access rows, by fleet, within these fleets (null: every fleet). */
export const specMappings = (db: Db, within: readonly string[] | null) =>
  db
    .select()
    .from(fleetSsoMappings)
    .where(
      within
        ? inArray(fleetSsoMappings.fleetId, sql`(SELECT value FROM json_each(${JSON.stringify(within)}))`)
        : undefined,
    )
    .orderBy(asc(fleetSsoMappings.fleetId), asc(fleetSsoMappings.kind), asc(fleetSsoMappings.value))
    .limit(SPEC_MAPPINGS_SHOWN);

/** A fleet's access rows as its spec reads them. */
export const fleetMappingsOf = (db: Db, fleet: string) =>
  db
    .select({ kind: fleetSsoMappings.kind, value: fleetSsoMappings.value, scope: fleetSsoMappings.scope })
    .from(fleetSsoMappings)
    .where(eq(fleetSsoMappings.fleetId, fleet));

/** The statement a spec's apply writes one access row with (its scope, or its removal: null), in the apply's batch. */
export const fleetMappingWrite = (
  db: Db,
  fleet: string,
  row: { kind: "email" | "group"; value: string; scope: Scope | null },
) =>
  row.scope === null
    ? db
        .delete(fleetSsoMappings)
        .where(
          and(
            eq(fleetSsoMappings.fleetId, fleet),
            eq(fleetSsoMappings.kind, row.kind),
            eq(fleetSsoMappings.value, row.value),
          ),
        )
    : db
        .insert(fleetSsoMappings)
        .values({ fleetId: fleet, kind: row.kind, value: row.value, scope: row.scope })
        .onConflictDoUpdate({
          target: [fleetSsoMappings.fleetId, fleetSsoMappings.kind, fleetSsoMappings.value],
          set: { scope: row.scope },
        });
