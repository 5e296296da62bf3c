import { routePath } from "hono/route";
import { createMiddleware } from "hono/factory";
import type { Context } from "hono";
import { errorFields, logLine } from "../lib/log";
import type { AppEnv } from "./types";

/*
 * One log line per request and one per unhandled error (with its stack). The route is the pattern
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
    // "off" only for local load tests: wrangler dev relays every console line through its
    // inspector, which halves local throughput; a deployment keeps it on (wrangler.toml).
    if (c.env.ACCESS_LOG === "off") return next();
    const started = performance.now();
    try {
      await next();
    } finally {
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
