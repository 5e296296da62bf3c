import { cors } from "hono/cors";
import { createMiddleware } from "hono/factory";
import type { AppEnv } from "./types";

/** Headers a browser page may read from an answer (beyond the CORS-safelisted ones). */
const EXPOSED = ["ETag", "Location", "Retry-After", "WWW-Authenticate", "X-Request-Id"];

const parse = (value: string | undefined) =>
  new Set(
    (value ?? "")
      .split(",")
      .map((o) => o.trim().replace(/\/+$/, ""))
      .filter(Boolean),
  );

/**
 * CORS for the origins in `CORS_ORIGINS` (comma-separated; `*` for any), preflight included. Off
 * when it is empty, the default: no CORS header is ever sent and preflights get no special answer.
 */
export function corsForConfiguredOrigins() {
  let cached: { raw: string | undefined; origins: Set<string>; handler: ReturnType<typeof cors> } | null = null;
  return createMiddleware<AppEnv>(async (c, next) => {
    const raw = c.env.CORS_ORIGINS;
    if (!cached || cached.raw !== raw) {
      const origins = parse(raw);
      cached = {
        raw,
        origins,
        handler: cors({
          origin: (origin) => (origins.has("*") || origins.has(origin) ? origin : null),
          allowMethods: ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE"],
          allowHeaders: ["Authorization", "Content-Type", "If-None-Match", "X-Request-Id"],
          exposeHeaders: EXPOSED,
          maxAge: 600,
        }),
      };
    }
    if (cached.origins.size === 0) return next();
    return cached.handler(c, next);
  });
}
