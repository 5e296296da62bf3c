import { createMiddleware } from "hono/factory";
import { getDb } from "../db/client";
import { DomainError, notFound } from "../domain/errors";
import { allFleets, BOOTSTRAP_ID, fleetAllowed, type OperatorPrincipal, type Principal } from "../domain/principal";
import type { AppEnv } from "../http/types";
import { digestsEqual, sha256Hex } from "../lib/crypto";
import { liveTokenOf } from "./store";
import { TOKEN_PROTOCOL_PREFIX } from "../domain/channel";
import { parseToken, scopeRank, type Scope } from "./tokens";
import { ACCESS_HEADER, accessConfig, verifyAccessJwt } from "./access";
import { grantFor } from "./sso-grant";

/** Answered with `WWW-Authenticate` (the edge adds it to every `unauthorized`). */
const unauthorized = (message = "a valid bearer token is required") => new DomainError("unauthorized", message);

function bearerOf(header: string | undefined) {
  const m = header ? /^Bearer\s+(\S+)\s*$/i.exec(header) : null;
  if (!m) throw unauthorized();
  return m[1];
}

/**
 * Digests of server tokens this isolate has seen. A digest is a pure function of the token, and
 * nothing is decided here: the server's ledger compares it with the digest it stores, so a revoked
 * or rotated token fails there on its next request, cached or not. Saves a SHA-256 per host
 * request; bounded, emptied when full (a flood of made-up tokens only costs hashing again).
 */
const serverDigests = new Map<string, string>();
const SERVER_DIGESTS_MAX = 4096;

async function serverTokenDigest(token: string): Promise<string> {
  let digest = serverDigests.get(token);
  if (digest === undefined) {
    digest = await sha256Hex(token);
    if (serverDigests.size >= SERVER_DIGESTS_MAX) serverDigests.clear();
    serverDigests.set(token, digest);
  }
  return digest;
}

/** ADMIN_TOKEN's digest, computed again only when the secret changes. */
let adminDigest: { token: string; digest: Promise<string> } | null = null;
function adminTokenDigest(token: string): Promise<string> {
  if (adminDigest?.token !== token) adminDigest = { token, digest: sha256Hex(token) };
  return adminDigest.digest;
}

async function authenticateOperator(env: AppEnv["Bindings"], token: string): Promise<Principal> {
  const hash = await sha256Hex(token);
  if (env.ADMIN_TOKEN && digestsEqual(hash, await adminTokenDigest(env.ADMIN_TOKEN))) {
    return { kind: "operator", id: BOOTSTRAP_ID, name: "ADMIN_TOKEN", scope: "admin", fleets: "*", via: "bootstrap" };
  }
  const parsed = parseToken(token);
  if (!parsed) throw unauthorized();
  const row = await liveTokenOf(getDb(env.DB), parsed);
  if (!row || !digestsEqual(row.hash, hash)) throw unauthorized();
  if (row.scope === "server") {
    throw new DomainError("forbidden", "server tokens reach only /v1/agent/* for their own server");
  }
  // An expired token is no token at all, exactly as a revoked one.
  if (row.expiresAt !== null && row.expiresAt <= Date.now()) throw unauthorized();
  return {
    kind: "operator",
    id: row.id,
    name: row.name,
    scope: row.scope,
    fleets: row.fleets,
    via: "token",
    ...(row.expiresAt !== null ? { expiresAt: row.expiresAt } : {}),
  };
}

/**
 * A deployment without the ADMIN_TOKEN secret has no first operator, so every operator call
 * would be a bare 401; the refusal says why and how to fix it instead.
 */
async function withAdminTokenHint<T>(env: AppEnv["Bindings"], authenticate: () => Promise<T>): Promise<T> {
  try {
    return await authenticate();
  } catch (err) {
    if (err instanceof DomainError && err.code === "unauthorized" && !env.ADMIN_TOKEN) {
      throw new DomainError(
        "unauthorized",
        "ADMIN_TOKEN is not set on this deployment, so no operator token exists yet: set it with " +
          "`npx wrangler secret put ADMIN_TOKEN` (locally: ADMIN_TOKEN=… in .dev.vars) and use it as the bearer token",
        { admin_token_configured: false },
      );
    }
    throw err;
  }
}

/** Whether the principal is an operator whose scope is at least `scope`. */
export const hasScope = (principal: Principal, scope: Scope) =>
  principal.kind === "operator" && scopeRank(principal.scope) >= scopeRank(scope);

/**
 * A request through Cloudflare Access without a bearer token: the user its verified JWT names, with
 * the scope and fleets the SSO mappings give them (none: refused). Checked on every request, so
 * a mapping removed takes effect at once; the keys are cached (./access.ts).
 */
async function accessPrincipal(env: AppEnv["Bindings"], jwt: string): Promise<OperatorPrincipal> {
  const config = accessConfig(env);
  if (!config) throw unauthorized();
  const { who, exp } = await verifyAccessJwt(config, jwt);
  const grant = await grantFor(env, who);
  const user = who.email ?? who.subject;
  return {
    kind: "operator",
    id: `access:${user}`,
    name: user,
    scope: grant.scope,
    fleets: grant.fleets,
    via: "access",
    expiresAt: exp,
  };
}

/** Operator routes: a valid operator token whose scope is at least `scope`. */
export const requireScope = (scope: Scope) =>
  createMiddleware<AppEnv>(async (c, next) => {
    const authorization = c.req.header("Authorization");
    const assertion = c.req.header(ACCESS_HEADER);
    const principal =
      authorization === undefined && assertion !== undefined && accessConfig(c.env)
        ? await accessPrincipal(c.env, assertion)
        : await withAdminTokenHint(c.env, () => authenticateOperator(c.env, bearerOf(authorization)));
    if (!hasScope(principal, scope)) {
      throw new DomainError("forbidden", `this needs a token with scope '${scope}' or higher`);
    }
    // Every route under /v1/fleets/{fleet} is guarded here, so a route added later inherits it.
    const fleet = fleetInPath(c.req.path);
    if (fleet !== null && !fleetAllowed(principal, fleet)) throw notFound("fleet", fleet);
    c.set("principal", principal);
    await next();
  });

/**
 * The fleet a /v1/fleets/{fleet}/… path names. A fleet outside the token's list answers exactly as
 * a fleet that does not exist, so a token cannot learn which fleets exist beyond its own.
 */
function fleetInPath(path: string): string | null {
  const m = /^\/v1\/fleets\/([^/]+)/.exec(path);
  if (!m) return null;
  try {
    return decodeURIComponent(m[1]);
  } catch {
    return m[1];
  }
}

/**
 * Deployment-wide changes (the image catalog, agent builds, data upgrades) reach every fleet, so
 * they take a token of every fleet.
 */
export const requireAllFleets = createMiddleware<AppEnv>(async (c, next) => {
  if (!allFleets(c.var.principal)) {
    throw new DomainError("forbidden", 'this changes every fleet: it needs a token of every fleet ("*")');
  }
  await next();
});

/**
 * A WebSocket client that cannot set headers (a browser) offers its token as a subprotocol,
 * `hm-token.<token>`, beside the protocol it speaks: never in the URL, which proxies log.
 */
function protocolTokenOf(header: string | undefined) {
  const offered = header
    ?.split(",")
    .map((p) => p.trim())
    .find((p) => p.startsWith(TOKEN_PROTOCOL_PREFIX));
  return offered?.slice(TOKEN_PROTOCOL_PREFIX.length);
}

/**
 * Host routes: only a server token (on a WebSocket upgrade, also as a subprotocol). Its digest is checked by the server's own ledger, so the
 * hot path (desired polls, reports) never reads D1.
 */
export const requireServer = createMiddleware<AppEnv>(async (c, next) => {
  const token =
    c.req.header("Authorization") === undefined
      ? (protocolTokenOf(c.req.header("Sec-WebSocket-Protocol")) ?? bearerOf(undefined))
      : bearerOf(c.req.header("Authorization"));
  const parsed = parseToken(token);
  if (parsed?.kind !== "server") {
    // A valid operator token is refused as such (403); anything else is simply not a token (401).
    await authenticateOperator(c.env, token);
    throw new DomainError("forbidden", "/v1/agent/* takes a server token, not an operator token");
  }
  c.set("principal", { kind: "server", serverId: parsed.id, tokenHash: await serverTokenDigest(token) });
  await next();
});

export function operatorOf(p: Principal): OperatorPrincipal {
  if (p.kind !== "operator") throw new DomainError("forbidden", "operator token required");
  return p;
}

export function serverPrincipal(p: Principal) {
  if (p.kind !== "server") throw new DomainError("forbidden", "server token required");
  return p;
}
