import { OpenAPIHono } from "@hono/zod-openapi";
import { bodyLimit } from "hono/body-limit";
import { createMiddleware } from "hono/factory";
import { HTTPException } from "hono/http-exception";
import { requestId } from "hono/request-id";
import type { Context } from "hono";
import { auditRoutes } from "./audit/routes";
import { tokenRoutes } from "./auth/routes";
import { fleetRoutes } from "./fleets/routes";
import { serverRoutes } from "./servers/routes";
import { instanceRoutes } from "./instances/routes";
import { agentRoutes } from "./host/routes";
import { fleetlockRoutes } from "./fleetlock/protocol.routes";
import { rebootGroupRoutes } from "./fleetlock/operator.routes";
import { metricsText, staleCounters } from "./metrics/service";
import { d1Counters } from "./db/client";
import { meterReading } from "./objects/kit/meter";
import { requireScope } from "./auth/principal";
import { allowedMethodsFinder } from "./http/allow";
import { bodyClaimProblem } from "./http/content";
import { corsForConfiguredOrigins } from "./http/cors";
import { logError, requestLog } from "./http/log";
import { DOCUMENT_CONFIG, registerServiceEndpoints, withRequestIdHeaders } from "./http/document";
import { rejectUnknownQuery } from "./http/query";
import { ApiError, errorBody } from "./http/errors";
import type { AppEnv } from "./http/types";
import { validationHook } from "./http/validation";
import { drainWrites } from "./upgrades/drain";
import { upgradeRoutes } from "./upgrades/routes";
import { checkRoutes } from "./check/routes";
import { intentRoutes } from "./intent/routes";
import { serverPlanRoutes } from "./servers/plan.routes";
import { MAX_BODY_BYTES } from "./domain/limits";
import { rolloutRoutes } from "./rollouts/routes";


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

  // Every route, FleetLock and /healthz included: a request id (X-Request-Id taken when it is a
  // sane token, else made), returned in the answer and its error body, and one log line each.
  app.use("*", requestId());
  app.use("*", requestLog);
  app.use("*", corsForConfiguredOrigins());
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
  app.use("/v1/*", rejectUnknownQuery(() => app.openAPIRegistry.definitions as never));
  // While upgrade steps are pending, writes answer 503 (hosts' own endpoints excepted).
  app.use("/v1/*", drainWrites());

  // Each resource under its own prefix, in one chain, so `AppType` carries every route (hc).
  const routes = app
    .get("/healthz", (c) => c.json({ ok: true as const }, 200))
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
        ? c.json({ ...d1Counters, stale: { ticks: staleCounters.ticks, rows_read: staleCounters.rowsRead, marked: staleCounters.marked } }, 200) : c.json(errorBody("not_found", "no such route"), 404),
    )
    // The local cost meter (src/objects/kit/meter.ts), likewise local only; DELETE reads and starts a new window.
    .on(["GET", "DELETE"], "/__local/meter", (c) => (c.env.LOCAL_COUNTERS === "1" ? c.json(meterReading({ reset: c.req.method === "DELETE" }), 200) : c.json(errorBody("not_found", "no such route"), 404)))
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
  registerServiceEndpoints(app.openAPIRegistry);
  let document: ReturnType<typeof app.getOpenAPI31Document> | null = null;
  app.get("/openapi.json", (c) => {
    document ??= withRequestIdHeaders(app.getOpenAPI31Document(DOCUMENT_CONFIG));
    return c.json(document, 200);
  });

  /** An error answer, carrying the request id so a report can be matched with the logs. */
  const failure = (c: Context<AppEnv>, code: string, message: string, details?: unknown) => {
    const { error } = errorBody(code, message, details);
    return { error: { ...error, request_id: c.get("requestId") } };
  };
  const allowedMethods = allowedMethodsFinder(() => app.routes);
  app.notFound((c) => {
    const allow = allowedMethods(c.req.path);
    if (allow.length) {
      return c.json(
        failure(c, "method_not_allowed", `${c.req.path} takes ${allow.join(", ")}, not ${c.req.method}`, { allow }),
        405,
        { Allow: allow.join(", ") },
      );
    }
    return c.json(failure(c, "not_found", `no route for ${c.req.method} ${c.req.path}`), 404);
  });
  app.onError((err, c) => {
    if (err instanceof ApiError) {
      return c.json(failure(c, err.code, err.message, err.details), err.status, err.headers);
    }
    if (err instanceof HTTPException) {
      const code = err.status === 400 ? "malformed_json" : err.status === 413 ? "payload_too_large" : "bad_request";
      return c.json(failure(c, code, err.message || "bad request"), err.status);
    }
    logError(c, err);
    return c.json(failure(c, "internal_error", "internal error"), 500);
  });
  return routes;
}

/** The API's type: every route with its inputs and outputs, for hono's typed client (src/client). */
export type AppType = ReturnType<typeof createApp>;
