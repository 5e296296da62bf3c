import { Hono } from "hono";
import { requireScope } from "../auth/principal";
import { d1Counters } from "../db/client";
import { errorBody } from "../http/errors";
import type { AppEnv } from "../http/types";
import { meterReading } from "../objects/kit/meter";
import { metricsText, staleCounters } from "./service";

/** Mounted at the root: documented with the service endpoints (src/http/document.ts). */
export const metricsRoutes = new Hono<AppEnv>()
  // Gauges from durable state; a read token unless METRICS_PUBLIC is "true".
  .get(
    "/metrics",
    async (c, next) => (c.env.METRICS_PUBLIC === "true" ? next() : requireScope("read")(c, next)),
    async (c) => c.text(await metricsText(c.env), 200, { "Content-Type": "text/plain; version=0.0.4" }),
  )
  // D1 statement counts of this isolate, for benchmarks and tests only: they are not a fleet
  // total, so they exist only where LOCAL_COUNTERS is "1" (never in wrangler.toml's deploy).
  .get("/__local/d1-statements", (c) =>
    c.env.LOCAL_COUNTERS === "1"
      ? c.json({ ...d1Counters, stale: { ticks: staleCounters.ticks, rows_read: staleCounters.rowsRead, marked: staleCounters.marked } }, 200)
      : c.json(errorBody("not_found", "no such route"), 404),
  )
  // The local cost meter (src/objects/kit/meter.ts), likewise local only; DELETE reads and starts a new window.
  .on(["GET", "DELETE"], "/__local/meter", (c) =>
    c.env.LOCAL_COUNTERS === "1"
      ? c.json(meterReading({ reset: c.req.method === "DELETE" }), 200)
      : c.json(errorBody("not_found", "no such route"), 404),
  );
