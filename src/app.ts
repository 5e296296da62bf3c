import { OpenAPIHono } from "@hono/zod-openapi";
import { HTTPException } from "hono/http-exception";
import type { Context } from "hono";
import { auditRoutes } from "./audit/routes";
import { tokenRoutes } from "./auth/routes";
import { ssoRoutes } from "./sso/routes";
import { fleetRoutes } from "./fleets/routes";
import { serverRoutes } from "./servers/routes";
import { serverLifecycleRoutes } from "./servers/lifecycle.routes";
import { instanceRoutes } from "./instances/routes";
import { agentRoutes } from "./host/routes";
import { fleetlockRoutes } from "./fleetlock/protocol.routes";
import { rebootGroupRoutes } from "./fleetlock/operator.routes";
import { gateRoutes } from "./fleetlock/gates.routes";
import { webhookApi } from "./webhooks/routes";
import { metricsRoutes } from "./metrics/routes";
import { DomainError } from "./domain/errors";
import { actorOf } from "./domain/principal";
import { allowedMethodsFinder } from "./http/allow";
import { requestRules } from "./http/content";
import { edge } from "./http/edge";
import { logError } from "./http/log";
import { DOCUMENT_CONFIG, registerServiceEndpoints, withRequestIdHeaders } from "./http/document";
import { rejectUnknownQuery } from "./http/query";
import { errorAnswer, renderDomainError, STATUS_OF_CODE } from "./http/errors";
import type { AppEnv } from "./http/types";
import { validationHook } from "./http/validation";
import { drainWrites } from "./upgrades/drain";
import { upgradeRoutes } from "./upgrades/routes";
import { checkRoutes } from "./check/routes";
import { intentRoutes } from "./intent/routes";
import { MAX_BODY_BYTES } from "./domain/limits";
import { rolloutRoutes } from "./rollouts/routes";
import { historyRoutes } from "./history/routes";
import { fleetSummaryRoutes } from "./status/summary.routes";
import { consoleRoutes } from "./console/routes";
import { specRoutes } from "./specs/routes";
import { statusRoutes } from "./status/routes";
import { enrollmentTokenRoutes, enrollRoutes } from "./enrollment/routes";
import { agentBuildRoutes, installRoutes } from "./agent-builds/routes";
import { imageRoutes } from "./images/routes";
import { imageBlobRoutes } from "./images/blob.routes";
import { MAX_PART_BYTES } from "./domain/images";

/** Who made a request, as the audit log names them; a FleetLock call is its fleet's. */
function requester(c: Context<AppEnv>, route: string | null) {
  const p = c.get("principal");
  if (p) return actorOf(p);
  if (route?.startsWith("/fleetlock/")) return `fleetlock:${c.req.path.split("/")[2] ?? ""}`;
  return null;
}

export function createApp() {
  const app = new OpenAPIHono<AppEnv>({ defaultHook: validationHook });

  // Every route, FleetLock and /healthz included: a request id (X-Request-Id taken when it is a
  // sane token, else made), returned in the answer and its error body, one log line each, CORS.
  app.use("*", edge(requester));
  // An agent build is bytes too (src/agent-builds/), but may come gzip-compressed and is larger
  // than an image's part: its route checks its own body (length, encoding, checksum).
  const agentBuild = (path: string) => path === "/v1/agent/builds" || path.startsWith("/v1/agent/builds/");
  app.use(
    "/v1/*",
    requestRules({
      maxBodyBytes: MAX_BODY_BYTES,
      maxPartBytes: MAX_PART_BYTES,
      exempt: agentBuild,
      checkQuery: rejectUnknownQuery(() => app.openAPIRegistry.definitions as never),
    }),
  );
  // While upgrade steps are pending, writes answer 503 (hosts' own endpoints excepted).
  app.use("/v1/*", drainWrites());

  // Each resource under its own prefix, in one chain, so `AppType` carries every route (hc).
  const routes = app
    .get("/healthz", (c) => c.json({ ok: true as const }, 200))
    .route("/", metricsRoutes)
    .route("/v1/tokens", tokenRoutes)
    .route("/v1/sso", ssoRoutes)
    .route("/v1/fleets", fleetRoutes)
    .route("/v1/fleets", rebootGroupRoutes)
    .route("/v1/fleets", fleetSummaryRoutes)
    .route("/v1/fleets", gateRoutes)
    .route("/v1/fleets", webhookApi)
    .route("/v1/servers", serverRoutes)
    .route("/v1/agent", agentRoutes)
    .route("/v1/instances", instanceRoutes)
    .route("/v1/audit", auditRoutes)
    .route("/v1/upgrades", upgradeRoutes)
    // Fleet intent and lifecycle.
    .route("/v1/fleets", intentRoutes)
    .route("/v1/servers", serverLifecycleRoutes)
    .route("/v1/check", checkRoutes)
    // Per-agent rollouts.
    .route("/v1/rollouts", rolloutRoutes)
    // Fleets as code.
    .route("/v1/fleets", specRoutes)
    // hm status in one request.
    .route("/v1/status", statusRoutes)
    // Enrollment (docs/images-and-enrollment.md) and the agent's builds.
    .route("/v1/fleets", enrollmentTokenRoutes)
    .route("/v1/agent", enrollRoutes)
    .route("/v1/agent", agentBuildRoutes)
    .route("/", installRoutes)
    // The image catalog, and its bytes for hosts.
    .route("/v1/images", imageRoutes)
    .route("/v1/agent", imageBlobRoutes)
    // The fleets' history (the cron's rollup).
    .route("/v1/fleets", historyRoutes)
    // FleetLock (hosts) sits outside /v1: its own body limit, no JSON Content-Type rule, its own error body.
    .route("/fleetlock", fleetlockRoutes);

  // The operator console: pages over this app's own API, called in-process.
  app.route(
    "/",
    consoleRoutes(() => app),
  );

  app.openAPIRegistry.registerComponent("securitySchemes", "Bearer", { type: "http", scheme: "bearer" });
  registerServiceEndpoints(app.openAPIRegistry);
  let document: ReturnType<typeof app.getOpenAPI31Document> | null = null;
  app.get("/openapi.json", (c) => {
    document ??= withRequestIdHeaders(app.getOpenAPI31Document(DOCUMENT_CONFIG));
    return c.json(document, 200);
  });

  const allowedMethods = allowedMethodsFinder(() => app.routes);
  app.notFound((c) => {
    const allow = allowedMethods(c.req.path);
    // A path whose route takes this very method but no handler answered is a missing thing, not a wrong method.
    if (allow.length && !allow.includes(c.req.method)) {
      return c.json(
        errorAnswer(c, "method_not_allowed", `${c.req.path} takes ${allow.join(", ")}, not ${c.req.method}`, { allow }),
        STATUS_OF_CODE.method_not_allowed,
        { Allow: allow.join(", ") },
      );
    }
    return c.json(errorAnswer(c, "not_found", `no route for ${c.req.method} ${c.req.path}`), STATUS_OF_CODE.not_found);
  });
  app.onError((err, c) => {
    if (err instanceof DomainError) return renderDomainError(c, err);
    // hono's own refusals (a body that is not JSON) keep the status hono chose.
    if (err instanceof HTTPException) {
      const code = err.status === 400 ? "malformed_json" : err.status === 413 ? "payload_too_large" : "bad_request";
      return c.json(errorAnswer(c, code, err.message || "bad request"), err.status);
    }
    logError(c, err);
    return c.json(errorAnswer(c, "internal_error", "internal error"), STATUS_OF_CODE.internal_error);
  });
  return routes;
}

/** The API's type: every route with its inputs and outputs, for hono's typed client (src/client). */
export type AppType = ReturnType<typeof createApp>;
