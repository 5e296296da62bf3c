import { and, asc, eq, gt, isNull } from "drizzle-orm";
import type { Db } from "../db/client";
import { tokens } from "../db/schema";
import type { TokenKind } from "../domain/enums";

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

/** A page of tokens by id (one more row than `limit` when another page exists). */
export const listTokens = (db: Db, kind: TokenKind | undefined, after: string | null, limit: number) =>
  db
    .select()
    .from(tokens)
    .where(and(kind ? eq(tokens.kind, kind) : undefined, after ? gt(tokens.id, after) : undefined))
    .orderBy(asc(tokens.id))
    .limit(limit + 1);
