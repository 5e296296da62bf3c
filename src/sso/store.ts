import { and, asc, desc, eq, gt, isNull } from "drizzle-orm";
import type { Db } from "../db/client";
import { ssoMappings, ssoSessions, tokens } from "../db/schema";
import { MAX_SSO_MAPPINGS } from "./schemas";

export type SsoMappingRow = typeof ssoMappings.$inferSelect;

export const allMappings = (db: Db) =>
  db.select().from(ssoMappings).orderBy(asc(ssoMappings.kind), asc(ssoMappings.value)).limit(MAX_SSO_MAPPINGS);

export const mappingById = (db: Db, id: string) => db.query.ssoMappings.findFirst({ where: eq(ssoMappings.id, id) });

/** Sessions whose token is neither revoked nor expired, newest first. */
export const liveSessions = (db: Db, now: number, limit: number) =>
  db
    .select({ s: ssoSessions, scope: tokens.scope, fleets: tokens.fleets })
    .from(ssoSessions)
    .innerJoin(tokens, eq(tokens.id, ssoSessions.tokenId))
    .where(and(gt(ssoSessions.expiresAt, now), isNull(tokens.revokedAt)))
    .orderBy(desc(ssoSessions.createdAt))
    .limit(limit);

export const sessionByToken = (db: Db, tokenId: string) =>
  db.query.ssoSessions.findFirst({ where: eq(ssoSessions.tokenId, tokenId) });
