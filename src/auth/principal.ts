import { and, eq, isNull } from "drizzle-orm";
import { createMiddleware } from "hono/factory";
import { getDb } from "../db/client";
import { tokens } from "../db/schema";
import { ApiError } from "../http/errors";
import type { AppEnv } from "../http/types";
import { digestsEqual, sha256Hex } from "../lib/crypto";
import { parseToken, scopeRank, type Scope } from "./tokens";

export type Principal =
  | { kind: "operator"; id: string; name: string; scope: Scope }
  | { kind: "server"; serverId: string; tokenHash: string };

/** Who the principal is, for the audit log. */
export function actorOf(p: Principal) {
  return p.kind === "operator" ? `token:${p.id}` : `server:${p.serverId}`;
}

const unauthorized = (message = "a valid bearer token is required") =>
  new ApiError(401, "unauthorized", message, undefined, { "WWW-Authenticate": 'Bearer realm="harbormaster"' });

function bearerOf(header: string | undefined) {
  const m = header ? /^Bearer\s+(\S+)\s*$/i.exec(header) : null;
  if (!m) throw unauthorized();
  return m[1];
}

async function authenticateOperator(env: AppEnv["Bindings"], token: string): Promise<Principal> {
  const hash = await sha256Hex(token);
  if (env.ADMIN_TOKEN && digestsEqual(hash, await sha256Hex(env.ADMIN_TOKEN))) {
    return { kind: "operator", id: "bootstrap", name: "ADMIN_TOKEN", scope: "admin" };
  }
  const parsed = parseToken(token);
  if (!parsed) throw unauthorized();
  const db = getDb(env.DB);
  const row = await db.query.tokens.findFirst({
    where:
      parsed.kind === "operator"
        ? and(eq(tokens.id, parsed.id), eq(tokens.kind, "operator"), isNull(tokens.revokedAt))
        : and(eq(tokens.serverId, parsed.id), eq(tokens.kind, "server"), isNull(tokens.revokedAt)),
  });
  if (!row || !digestsEqual(row.hash, hash)) throw unauthorized();
  if (row.scope === "server") {
    throw new ApiError(403, "forbidden", "server tokens reach only /v1/agent/* for their own server");
  }
  return { kind: "operator", id: row.id, name: row.name, scope: row.scope };
}

/** Operator routes: a valid operator token whose scope is at least `scope`. */
export const requireScope = (scope: Scope) =>
  createMiddleware<AppEnv>(async (c, next) => {
    const principal = await authenticateOperator(c.env, bearerOf(c.req.header("Authorization")));
    if (principal.kind !== "operator" || scopeRank(principal.scope) < scopeRank(scope)) {
      throw new ApiError(403, "forbidden", `this needs a token with scope '${scope}' or higher`);
    }
    c.set("principal", principal);
    await next();
  });

/**
 * Host routes: only a server token. Its digest is checked by the server's own ledger, so the
 * hot path (desired polls, reports) never reads D1.
 */
export const requireServer = createMiddleware<AppEnv>(async (c, next) => {
  const token = bearerOf(c.req.header("Authorization"));
  const parsed = parseToken(token);
  if (parsed?.kind !== "server") {
    // A valid operator token is refused as such (403); anything else is simply not a token (401).
    await authenticateOperator(c.env, token);
    throw new ApiError(403, "forbidden", "/v1/agent/* takes a server token, not an operator token");
  }
  c.set("principal", { kind: "server", serverId: parsed.id, tokenHash: await sha256Hex(token) });
  await next();
});

export function serverPrincipal(p: Principal) {
  if (p.kind !== "server") throw new ApiError(403, "forbidden", "server token required");
  return p;
}

export function operatorPrincipal(p: Principal) {
  if (p.kind !== "operator") throw new ApiError(403, "forbidden", "operator token required");
  return p;
}
