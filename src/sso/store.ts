import { and, asc, desc, eq, gt, isNull, sql } from "drizzle-orm";
import type { Db } from "../db/client";
import { ssoMappings, ssoSessions, tokens } from "../db/schema";
import { MAX_SSO_MAPPINGS } from "./schemas";

export type SsoMappingRow = typeof ssoMappings.$inferSelect;

export const allMappings = (db: Db) =>
  db.select().from(ssoMappings).orderBy(asc(ssoMappings.kind), asc(ssoMappings.value)).limit(MAX_SSO_MAPPINGS);

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
