/**
 * Console sessions (docs/console.md). The browser holds a random session id in an HttpOnly cookie; D1
 * holds its SHA-256 with the operator token's id, scope, the CSRF token and the expiry. The
 * operator token itself is sealed (AES-GCM) under a key derived from the session id, so neither
 * the table nor the cookie alone yields it: the console needs it to call the API as the operator.
 */
import { and, eq, lt } from "drizzle-orm";
import type { BatchItem } from "drizzle-orm/batch";
import type { Context } from "hono";
import { getCookie, setCookie } from "hono/cookie";
import { getDb } from "../db/client";
import { consoleSessions, ssoSessions, tokens } from "../db/schema";
import type { Scope } from "../domain/enums";
import { BOOTSTRAP_ID, type FleetAccess, type OperatorVia } from "../domain/principal";
import type { Env } from "../env";
import { digestsEqual, randomSecret, sha256Hex } from "../lib/crypto";
import { closeLiveSockets } from "../notices/sessions";

/** An absolute lifetime: a session never outlives it, however busy. */
const SESSION_TTL_S = 8 * 3600;

export interface Session {
  idHash: string;
  tokenId: string;
  scope: Scope;
  csrf: string;
  token: string;
  expiresAt: number;
  /** Who signed in, as the token names them (ADMIN_TOKEN for the bootstrap secret). */
  name: string;
  description: string | null;
  /** The token's fleets: the pages show only these, as the API does. */
  fleets: FleetAccess;
  via: OperatorVia;
  /** When the token itself expires (null: never); the session ends then at the latest. */
  tokenExpiresAt: number | null;
}

const LOOPBACK = new Set(["127.0.0.1", "localhost", "[::1]", "::1"]);

/** Secure cookies everywhere but a loopback address, where `npm start` serves plain HTTP. */
const isLoopback = (url: string) => LOOPBACK.has(new URL(url).hostname);

/** The __Host- prefix pins the cookie to this origin; it requires Secure, so loopback goes without. */
const cookieName = (c: Context, base: string) => (isLoopback(c.req.url) ? base : `__Host-${base}`);

export function setConsoleCookie(
  c: Context,
  base: string,
  value: string,
  maxAge: number,
  sameSite: "Strict" | "Lax" = "Strict",
) {
  setCookie(c, cookieName(c, base), value, {
    path: "/",
    httpOnly: true,
    secure: !isLoopback(c.req.url),
    sameSite,
    maxAge,
  });
}

export const readConsoleCookie = (c: Context, base: string) => getCookie(c, cookieName(c, base));

const SESSION_COOKIE = "hm_session";
const b64 = (bytes: Uint8Array) => btoa(String.fromCharCode(...bytes));
const unb64 = (text: string) => Uint8Array.from(atob(text), (ch) => ch.charCodeAt(0));

async function sealKey(sessionId: string) {
  const raw = await crypto.subtle.digest("SHA-256", new TextEncoder().encode(`console-seal:${sessionId}`));
  return crypto.subtle.importKey("raw", raw, "AES-GCM", false, ["encrypt", "decrypt"]);
}

async function seal(sessionId: string, token: string) {
  const iv = crypto.getRandomValues(new Uint8Array(12));
  const sealed = await crypto.subtle.encrypt(
    { name: "AES-GCM", iv },
    await sealKey(sessionId),
    new TextEncoder().encode(token),
  );
  return `${b64(iv)}.${b64(new Uint8Array(sealed))}`;
}

async function unseal(sessionId: string, sealed: string) {
  const [iv, data] = sealed.split(".");
  const plain = await crypto.subtle.decrypt({ name: "AES-GCM", iv: unb64(iv) }, await sealKey(sessionId), unb64(data));
  return new TextDecoder().decode(plain);
}

/** A token a console session is started for: its id, scope, secret and expiry. */
interface SessionToken {
  id: string;
  scope: Scope;
  secret: string;
  expiresAt: number | null;
}

/** A console session not yet stored: the writes that store it, and what the cookie needs once they are done. */
interface PendingSession {
  writes: [BatchItem<"sqlite">, BatchItem<"sqlite">];
  sessionId: string;
  expiresAt: number;
  now: number;
}

/** The rows of a new console session for the token, to write in one batch (the token's own, for an SSO sign-in). */
async function sessionWrites(env: Env, token: SessionToken): Promise<PendingSession> {
  const sessionId = randomSecret();
  const now = Date.now();
  // A session never outlives its token.
  const expiresAt = Math.min(now + SESSION_TTL_S * 1000, token.expiresAt ?? Infinity);
  const db = getDb(env.DB);
  return {
    writes: [
      // Expired sessions go as new ones come, through the expiry index.
      db.delete(consoleSessions).where(lt(consoleSessions.expiresAt, now)),
      db.insert(consoleSessions).values({
        idHash: await sha256Hex(sessionId),
        tokenId: token.id,
        scope: token.scope,
        csrf: randomSecret(),
        sealedToken: await seal(sessionId, token.secret),
        createdAt: now,
        expiresAt,
      }),
    ],
    sessionId,
    expiresAt,
    now,
  };
}

/** Hands the browser a stored session's cookie. */
function setSessionCookie(c: Context, s: PendingSession) {
  setConsoleCookie(c, SESSION_COOKIE, s.sessionId, Math.max(1, Math.ceil((s.expiresAt - s.now) / 1000)));
}

/** Starts a session for a token the API has just accepted; sets the cookie. */
export async function startSession(c: Context, token: SessionToken) {
  const pending = await sessionWrites(c.env as Env, token);
  await getDb((c.env as Env).DB).batch(pending.writes);
  setSessionCookie(c, pending);
}

/**
 * Signs in with a token minted for it (an SSO sign-in): `mint` writes the token's rows and the
 * session's rows `sessionOf` gives it in ONE batch, so a crash between them cannot leave a live token
 * that no session holds, listed as a signed-in user. The cookie is set once that batch is done.
 */
export async function signInMinted<T>(
  c: Context,
  mint: (sessionOf: (token: SessionToken) => Promise<BatchItem<"sqlite">[]>) => Promise<T>,
): Promise<T> {
  let pending: PendingSession | undefined;
  const minted = await mint(async (token) => {
    pending = await sessionWrites(c.env as Env, token);
    return pending.writes;
  });
  // No session was asked for (hm's sign-in through the console's callback): no cookie either.
  if (pending) setSessionCookie(c, pending);
  return minted;
}

/**
 * The request's session, or null: no cookie, unknown, expired, or its operator token revoked (one
 * statement: the token row is joined in). An ended session's row is deleted.
 */
export async function currentSession(c: Context): Promise<Session | null> {
  const sessionId = readConsoleCookie(c, SESSION_COOKIE);
  if (!sessionId || sessionId.length > 128) return null;
  const idHash = await sha256Hex(sessionId);
  const db = getDb((c.env as Env).DB);
  const [row] = await db
    .select({
      s: consoleSessions,
      revokedAt: tokens.revokedAt,
      tokenRow: tokens.id,
      name: tokens.name,
      description: tokens.description,
      fleets: tokens.fleets,
      tokenExpiresAt: tokens.expiresAt,
      // An SSO session's token says through which provider its user signed in.
      provider: ssoSessions.provider,
    })
    .from(consoleSessions)
    .leftJoin(tokens, eq(tokens.id, consoleSessions.tokenId))
    .leftJoin(ssoSessions, eq(ssoSessions.tokenId, consoleSessions.tokenId))
    .where(eq(consoleSessions.idHash, idHash))
    .limit(1);
  if (!row) return null;
  const now = Date.now();
  const bootstrap = row.s.tokenId === BOOTSTRAP_ID;
  const revoked = !bootstrap && (row.tokenRow === null || row.revokedAt !== null);
  const tokenExpired = !bootstrap && row.tokenExpiresAt !== null && row.tokenExpiresAt <= now;
  if (revoked || tokenExpired || row.s.expiresAt <= now) {
    await endSessionRow(c.env as Env, idHash);
    return null;
  }
  let token: string;
  try {
    token = await unseal(sessionId, row.s.sealedToken);
  } catch {
    return null;
  }
  return {
    idHash,
    tokenId: row.s.tokenId,
    scope: row.s.scope,
    csrf: row.s.csrf,
    token,
    expiresAt: row.s.expiresAt,
    name: bootstrap ? "ADMIN_TOKEN" : (row.name ?? ""),
    description: bootstrap ? null : (row.description ?? null),
    fleets: bootstrap ? "*" : (row.fleets ?? []),
    via: bootstrap ? "bootstrap" : (row.provider ?? "token"),
    tokenExpiresAt: bootstrap ? null : (row.tokenExpiresAt ?? null),
  };
}

async function endSessionRow(env: Env, idHash: string) {
  await getDb(env.DB).delete(consoleSessions).where(eq(consoleSessions.idHash, idHash));
}

/** Signs out: the row goes, its open pages' live sockets close, and the browser is told to forget the cookie. */
export async function endSession(c: Context, session: Session | null) {
  if (session) {
    await endSessionRow(c.env as Env, session.idHash);
    await closeLiveSockets(c.env as Env, { session: session.idHash }, "signed out", session.fleets);
  }
  setConsoleCookie(c, SESSION_COOKIE, "", 0);
}

/** The scope and expiry of an operator token the API accepted: from its row, or admin for ADMIN_TOKEN. */
export async function tokenGrant(
  env: Env,
  tokenId: string,
): Promise<{ scope: Scope; expiresAt: number | null } | null> {
  if (tokenId === BOOTSTRAP_ID) return { scope: "admin", expiresAt: null };
  const row = await getDb(env.DB).query.tokens.findFirst({
    where: and(eq(tokens.id, tokenId), eq(tokens.kind, "operator")),
    columns: { scope: true, revokedAt: true, expiresAt: true },
  });
  if (!row || row.revokedAt !== null || row.scope === "server") return null;
  if (row.expiresAt !== null && row.expiresAt <= Date.now()) return null;
  return { scope: row.scope, expiresAt: row.expiresAt };
}

/** Constant-time comparison of two secrets of any length. */
export function sameSecret(a: string | undefined | null, b: string) {
  return typeof a === "string" && a.length === b.length && digestsEqual(a, b);
}
