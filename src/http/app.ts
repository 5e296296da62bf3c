import { OpenAPIHono } from "@hono/zod-openapi";
import { bodyLimit } from "hono/body-limit";
import { createMiddleware } from "hono/factory";
import { HTTPException } from "hono/http-exception";
import { auditRoutes } from "../audit/routes";
import { tokenRoutes } from "../auth/routes";
import { fleetRoutes } from "../fleet/fleets.routes";
import { serverRoutes } from "../fleet/servers.routes";
import { instanceRoutes } from "../instances/routes";
import { agentRoutes } from "../ledger/agent.routes";
import { fleetlockRoutes } from "../fleetlock/protocol.routes";
import { rebootGroupRoutes } from "../fleetlock/operator.routes";
import { metricsText, recordResponse } from "../metrics";
import { ApiError, errorBody } from "./errors";
import type { AppEnv } from "./types";
import { validationHook } from "./validation";
import { drainWrites } from "../upgrades/drain";
import { upgradeRoutes } from "../upgrades/routes";
import { rolloutRoutes } from "../rollouts/routes";

export const MAX_BODY_BYTES = 1024 * 1024;

/**
 * Bodies are JSON. A body sent as anything else (curl's -d defaults to form encoding) would be
 * read as an empty object and fail validation confusingly, so it is refused by name.
 */
const requireJsonBody = createMiddleware<AppEnv>(async (c, next) => {
  if (c.req.method === "GET" || c.req.method === "HEAD") return next();
  const type = c.req.header("Content-Type");
  const length = c.req.header("Content-Length");
  const hasBody = c.req.raw.body !== null && length !== "0";
  if (hasBody && !(type && /^application\/([\w.-]+\+)?json\s*(;|$)/i.test(type))) {
    throw new ApiError(415, "unsupported_media_type", "send the body as JSON with Content-Type: application/json");
  }
  await next();
});

export function createApp() {
  const app = new OpenAPIHono<AppEnv>({ defaultHook: validationHook });

  app.use("*", async (c, next) => {
    await next();
    recordResponse(c.res.status);
  });
  app.use(
    "/v1/*",
    bodyLimit({
      maxSize: MAX_BODY_BYTES,
      onError: () => {
        throw new ApiError(413, "payload_too_large", `request bodies are limited to ${MAX_BODY_BYTES} bytes`);
      },
    }),
  );
  app.use("/v1/*", requireJsonBody);
  // While upgrade steps are pending, writes answer 503 (hosts' own endpoints excepted).
  app.use("/v1/*", drainWrites());

  app.get("/healthz", (c) => c.json({ ok: true }));
  app.get("/metrics", (c) => c.text(metricsText(), 200, { "Content-Type": "text/plain; version=0.0.4" }));

  for (const routes of [tokenRoutes, fleetRoutes, serverRoutes, agentRoutes, instanceRoutes, auditRoutes]) {
    app.route("/", routes);
  }
  app.route("/", upgradeRoutes);
  // FleetLock (hosts) sits outside /v1: its own body limit, no JSON Content-Type rule, its own error body.
  app.route("/", fleetlockRoutes);
  app.route("/", rebootGroupRoutes);
  app.route("/", rolloutRoutes);

  app.openAPIRegistry.registerComponent("securitySchemes", "Bearer", { type: "http", scheme: "bearer" });
  app.doc31("/openapi.json", {
    openapi: "3.1.0",
    info: {
      title: "Harbormaster",
      version: "0.1.0",
      description: "Control plane for the agents that run on a fleet of servers.",
    },
  });

  app.notFound((c) => c.json(errorBody("not_found", `no route for ${c.req.method} ${c.req.path}`), 404));
  app.onError((err, c) => {
    if (err instanceof ApiError) {
      return c.json(errorBody(err.code, err.message, err.details), err.status, err.headers);
    }
    if (err instanceof HTTPException) {
      const code = err.status === 400 ? "malformed_json" : err.status === 413 ? "payload_too_large" : "bad_request";
      return c.json(errorBody(code, err.message || "bad request"), err.status);
    }
    console.error("unhandled error", err);
    return c.json(errorBody("internal_error", "internal error"), 500);
  });
  return app;
}
