/**
 * What every console answer carries (strict CSP, no framing) and what every state-changing console
 * request must show: its own origin (Origin header) and the session's CSRF token.
 */
import type { Context, MiddlewareHandler } from "hono";
import { createMiddleware } from "hono/factory";
import type { Env } from "../env";
import { currentSession, readConsoleCookie, sameSecret, type Session } from "./session";
import type { ErrorStatus } from "./statuses";
import { accessSession } from "./access-sign-in";

export type ConsoleEnv = { Bindings: Env; Variables: { session: Session } };

/** No inline script or style anywhere: the one module and the one stylesheet come from here. */
function contentSecurityPolicy(url: string) {
  const { host, protocol } = new URL(url);
  const socket = `${protocol === "https:" ? "wss" : "ws"}://${host}`;
  return [
    "default-src 'none'",
    "script-src 'self'",
    "style-src 'self'",
    "img-src 'self' data:",
    `connect-src 'self' ${socket}`,
    "form-action 'self'",
    "frame-ancestors 'none'",
    "base-uri 'none'",
  ].join("; ");
}

export const securityHeaders: MiddlewareHandler = async (c, next) => {
  await next();
  const h = c.res.headers;
  h.set("Content-Security-Policy", contentSecurityPolicy(c.req.url));
  h.set("X-Frame-Options", "DENY");
  h.set("X-Content-Type-Options", "nosniff");
  h.set("Referrer-Policy", "same-origin");
  h.set("Cross-Origin-Opener-Policy", "same-origin");
  h.set("Cross-Origin-Resource-Policy", "same-origin");
  h.set("Permissions-Policy", "camera=(), microphone=(), geolocation=()");
  if (!h.has("Cache-Control")) h.set("Cache-Control", "no-store");
};

/** The request came from a page of this origin (browsers send Origin on every POST and WebSocket). */
export const sameOrigin = (c: Context) => c.req.header("Origin") === new URL(c.req.url).origin;

export class Refused extends Error {
  constructor(
    readonly status: ErrorStatus,
    message: string,
  ) {
    super(message);
  }
}

/** Pages: a live session, else off to sign in (with where to come back to). */
export const requireSession = createMiddleware<ConsoleEnv>(async (c, next) => {
  const session = await currentSession(c);
  if (!session) {
    const access = await accessSession(c);
    // Signed in through Cloudflare Access: the answer carries the new cookie; the same page again reads it.
    if (access?.started) return c.redirect(new URL(c.req.url).pathname + new URL(c.req.url).search, 303);
    if (access) throw new Refused(access.status, access.message);
    const back = new URL(c.req.url);
    return c.redirect(`/console/sign-in?next=${encodeURIComponent(back.pathname + back.search)}`, 303);
  }
  c.set("session", session);
  await next();
});

/** The token a form or the client module sent: a form field `_csrf`, or the X-CSRF-Token header. */
async function sentToken(c: Context) {
  const header = c.req.header("X-CSRF-Token");
  if (header) return header;
  const type = c.req.header("Content-Type") ?? "";
  if (!/^(application\/x-www-form-urlencoded|multipart\/form-data)/i.test(type)) return undefined;
  const form = await c.req.parseBody();
  return typeof form._csrf === "string" ? form._csrf : undefined;
}

/** State-changing console requests: a session, this origin, and the session's CSRF token. */
export const requireCsrf = createMiddleware<ConsoleEnv>(async (c, next) => {
  const session = await currentSession(c);
  if (!session) throw new Refused(401, "Your session has ended: sign in again.");
  if (!sameOrigin(c)) throw new Refused(403, "Refused: the request did not come from this console (Origin).");
  if (!sameSecret(await sentToken(c), session.csrf))
    throw new Refused(403, "Refused: the form's CSRF token is missing or wrong. Reload the page and try again.");
  c.set("session", session);
  await next();
});

/** Sign-in has no session yet: its form carries the value of a short-lived cookie (double submit). */
export async function checkSignInCsrf(c: Context) {
  if (!sameOrigin(c)) throw new Refused(403, "Refused: the request did not come from this console (Origin).");
  const expected = readConsoleCookie(c, "hm_signin");
  if (!expected || !sameSecret(await sentToken(c), expected)) {
    throw new Refused(403, "Refused: the sign-in form expired. Reload the page and try again.");
  }
}
