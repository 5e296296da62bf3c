import { Hono } from "hono";
import { requireScope } from "../auth/principal";
import { visibleFleets } from "../domain/principal";
import type { AppEnv } from "../http/types";
import { metricsText } from "./service";

/** Mounted at the root: documented with the service endpoints (src/http/document.ts). */
export const metricsRoutes = new Hono<AppEnv>()
  // Gauges from durable state; a read token unless METRICS_PUBLIC is "true".
  .get(
    "/metrics",
    async (c, next) => (c.env.METRICS_PUBLIC === "true" ? next() : requireScope("read")(c, next)),
    async (c) => {
      // Public metrics (METRICS_PUBLIC) were chosen to show every fleet; a token shows its own fleets.
      const principal = c.get("principal");
      const visible = principal ? visibleFleets(principal) : null;
      return c.text(await metricsText(c.env, visible), 200, { "Content-Type": "text/plain; version=0.0.4" });
    },
  );
