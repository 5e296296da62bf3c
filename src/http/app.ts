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
import { bodyClaimProblem } from "./content";
import { ApiError, errorBody } from "./errors";
import type { AppEnv } from "./types";
import { validationHook } from "./validation";
import { drainWrites } from "../upgrades/drain";
import { upgradeRoutes } from "../upgrades/routes";
import { checkRoutes } from "../check/routes";
import { intentRoutes } from "../intent/routes";
import { serverPlanRoutes } from "../intent/server.routes";
import { MAX_BODY_BYTES } from "../domain/limits";
import { rolloutRoutes } from "../rollouts/routes";


/**
 * Bodies are UTF-8 JSON, sent as is. A body sent as anything else (curl's -d defaults to form
 * encoding) would be read as an empty object and fail validation confusingly, and one declaring a
 * content coding or charset would be read as something it is not, so each is refused by name.
 */
const requireJsonBody = createMiddleware<AppEnv>(async (c, next) => {
  if (c.req.method === "GET" || c.req.method === "HEAD") return next();
  const type = c.req.header("Content-Type");
  const length = c.req.header("Content-Length");
  const hasBody = c.req.raw.body !== null && length !== "0";
  if (!hasBody) return next();
  const claim = bodyClaimProblem(c.req.raw.headers);
  if (claim?.code === "unsupported_content_encoding") throw new ApiError(415, claim.code, claim.message, claim.details);
  if (!(type && /^application\/([\w.-]+\+)?json\s*(;|$)/i.test(type))) {
    throw new ApiError(415, "unsupported_media_type", "send the body as JSON with Content-Type: application/json");
  }
  if (claim) throw new ApiError(415, claim.code, claim.message, claim.details);
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

  // Each resource under its own prefix, in one chain, so `AppType` carries every route (hc).
  const routes = app
    .get("/healthz", (c) => c.json({ ok: true as const }, 200))
    .get("/metrics", (c) => c.text(metricsText(), 200, { "Content-Type": "text/plain; version=0.0.4" }))
    .route("/v1/tokens", tokenRoutes)
    .route("/v1/fleets", fleetRoutes)
    .route("/v1/fleets", rebootGroupRoutes)
    .route("/v1/servers", serverRoutes)
    .route("/v1/agent", agentRoutes)
    .route("/v1/instances", instanceRoutes)
    .route("/v1/audit", auditRoutes)
    .route("/v1/upgrades", upgradeRoutes)
    // Fleet intent and lifecycle (issue 8).
    .route("/v1/fleets", intentRoutes)
    .route("/v1/servers", serverPlanRoutes)
    .route("/v1/check", checkRoutes)
    // Per-agent rollouts (issue 9).
    .route("/v1/rollouts", rolloutRoutes)
    // FleetLock (hosts) sits outside /v1: its own body limit, no JSON Content-Type rule, its own error body.
    .route("/fleetlock", fleetlockRoutes);

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
  return routes;
}

/** The API's type: every route with its inputs and outputs, for hono's typed client (src/client). */
export type AppType = ReturnType<typeof createApp>;
