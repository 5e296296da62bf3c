import { routePath } from "hono/route";
import { createMiddleware } from "hono/factory";
import type { Context } from "hono";
import { errorFields, logLine } from "../lib/log";
import type { AppEnv } from "./types";

/*
 * One log line per request (ACCESS_LOG "on"), per request that may change state (ACCESS_LOG "writes",
 * the deployed default: every method but GET and HEAD, and any answer 5xx), or none ("off"); one
 * per unhandled error (with its stack) whatever the setting. The route is the pattern
 * the request matched (`/fleetlock/:fleet/:key/v1/pre-reboot`), never the raw path, so a FleetLock
 * key or a token never reaches a log.
 */

/**
 * The route pattern the request was answered by, or null when none matched. After the chain has
 * run, the route index points at the handler that answered.
 */
function routeOf(c: Context<AppEnv>) {
  const path = routePath(c);
  return path && path !== "*" && !path.endsWith("/*") ? path : null;
}

/**
 * The request log, naming who made each request as `actorOf` says (the app knows its principals
 * and routes; this toolkit does not), given the route pattern that answered.
 */
export function requestLog(actorOf: (c: Context<AppEnv>, route: string | null) => string | null) {
  return createMiddleware<AppEnv>(async (c, next) => {
    // "off" for local load tests (wrangler dev relays every console line through its inspector,
    // which halves local throughput); a deployment logs writes (wrangler.toml): a line for every
    // request of a fleet's hosts is most of its bill (docs/deploy.md, "Logs and what they cost").
    const mode = c.env.ACCESS_LOG;
    if (mode === "off") return next();
    const started = performance.now();
    try {
      await next();
    } finally {
      const read = c.req.method === "GET" || c.req.method === "HEAD";
      if (mode === "on" || !read || c.res.status >= 500) logRequest(c, started, actorOf);
    }
  });
}

function logRequest(
  c: Context<AppEnv>,
  started: number,
  actorOf: (c: Context<AppEnv>, route: string | null) => string | null,
) {
  const route = routeOf(c);
  logLine(c.res.status >= 500 ? "error" : "info", "request", {
    request_id: c.get("requestId"),
    method: c.req.method,
    route,
    status: c.res.status,
    duration_ms: Math.round((performance.now() - started) * 10) / 10,
    principal: actorOf(c, route),
  });
}

/** An error nobody handled: its message and stack, with the request it broke. */
export function logError(c: Context<AppEnv>, err: unknown) {
  logLine("error", "unhandled error", {
    request_id: c.get("requestId"),
    method: c.req.method,
    route: routeOf(c),
    ...errorFields(err),
  });
}
