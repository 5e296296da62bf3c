import { createRoute, OpenAPIHono, z, type Hook } from "@hono/zod-openapi";
import { createMiddleware } from "hono/factory";
import type { ZodError } from "zod";
import { hasScope, requireScope } from "../auth/principal";
import { DomainError } from "../domain/errors";
import { actorOf } from "../domain/principal";
import { backgroundOf } from "../http/background";
import {
  bearer,
  commonErrors,
  etagHeader,
  jsonBody,
  jsonResponse,
  locationHeader,
  notFoundError,
  conflictError,
  errorResponse,
  errorWithDetails,
  preconditionError,
} from "../http/openapi";
import type { AppEnv } from "../http/types";
import { validationHook } from "../http/validation";
import { fleetParam } from "../fleets/schemas";
import { SpecSecretsSchema } from "../webhooks/schemas";
import { FleetSpec, SpecApplied, SpecDiff, SpecProblem, SpecRequest, specQuery, unwrapRequest } from "./schemas";
import { applyFleetSpec, diffFleetSpec, fleetSpec, refuseInvalidSpec } from "./service";

const specTag = etagHeader("Strong tag of the fleet's spec: a hash of the document GET answers");

const invalidSpec = {
  422: errorResponse(
    "The spec has problems (invalid_spec): every one of them, with its path in the document; nothing changed",
    undefined,
    errorWithDetails("InvalidSpecError", z.object({ problems: z.array(SpecProblem) })),
  ),
};

/**
 * A spec its schema refuses is answered with all its problems (schema and references), as
 * `invalid_spec`; the other parts of the request as everywhere else.
 */
const secretsPart = z.object({ secrets: SpecSecretsSchema.optional() });

const specHook: Hook<unknown, AppEnv, string, unknown> = async (result, c) => {
  if (result.success || result.target !== "json") return validationHook(result, c);
  const raw = (result as { data?: unknown }).data;
  // The body is the spec, or {spec, secrets}: each part is checked on its own, so a problem's path
  // is its place in the document (a union's error names neither).
  const isEnvelope = typeof raw === "object" && raw !== null && "spec" in raw && !("apiVersion" in raw);
  const parts = isEnvelope ? (raw as { spec: unknown; secrets?: unknown }) : { spec: raw, secrets: undefined };
  const errors: ZodError[] = [
    FleetSpec.safeParse(parts.spec).error,
    secretsPart.safeParse({ secrets: parts.secrets }).error,
  ].filter((e) => e !== undefined);
  if (errors.length === 0) errors.push(result.error as ZodError); // the envelope itself (an unknown field beside spec and secrets)
  await refuseInvalidSpec(c.env, c.req.param("fleet") ?? "", parts.spec, c.req.query("prune") === "true", errors);
};

/**
 * hono reads `spec:diff` as `spec` and a parameter `diff`, so this route's path also matches
 * `…/specanything`; only the literal last segment `spec:diff` is it.
 */
const literalSpecDiff = createMiddleware<AppEnv>(async (c, next) => {
  if (decodeURIComponent(c.req.path.slice(c.req.path.lastIndexOf("/") + 1)) !== "spec:diff")
    throw new DomainError("not_found", `no route for ${c.req.method} ${c.req.path}`);
  await next();
});

// One chain, so the type of this router (and of the app that mounts it) carries every route for hc.
export const specRoutes = new OpenAPIHono<AppEnv>({ defaultHook: specHook })
  .openapi(
    createRoute({
      method: "get",
      path: "/{fleet}/spec",
      operationId: "getFleetSpec",
      tags: ["fleet specs"],
      summary: "The fleet as a spec: settings, capabilities, channels, roles, reboot groups",
      security: bearer,
      middleware: [requireScope("read")] as const,
      request: { params: fleetParam },
      responses: {
        200: { ...jsonResponse(FleetSpec, "The fleet's spec (what `hm export` writes)"), headers: specTag },
        ...commonErrors,
        ...notFoundError,
      },
    }),
    async (c) => {
      const { fleet } = c.req.valid("param");
      const { spec, etag } = await fleetSpec(c.env, fleet);
      c.header("ETag", etag);
      return c.json(spec, 200);
    },
  )
  .openapi(
    createRoute({
      method: "post",
      path: "/{fleet}/spec:diff",
      operationId: "diffFleetSpec",
      tags: ["fleet specs"],
      summary: "What the spec would change, item by item, and which servers the planner would re-plan; changes nothing",
      description:
        "Secrets sent beside the spec need a token with scope write (403 forbidden otherwise): the diff shows a secret " +
        "that differs from the kept one, so a read token could confirm a guessed secret. Without them a kept secret is " +
        "compared as unchanged.",
      security: bearer,
      middleware: [literalSpecDiff, requireScope("read")] as const,
      request: { params: fleetParam, query: specQuery, body: jsonBody(SpecRequest) },
      responses: {
        200: { ...jsonResponse(SpecDiff, "The differences (none: `equal`)"), headers: specTag },
        ...commonErrors,
        ...notFoundError,
        ...invalidSpec,
      },
    }),
    async (c) => {
      const { fleet } = c.req.valid("param");
      const input = unwrapRequest(c.req.valid("json"));
      // Comparing sent secrets with the kept ones answers whether a guess is right: the apply's scope.
      if (Object.keys(input.secrets).length > 0 && !hasScope(c.var.principal, "write")) {
        throw new DomainError(
          "forbidden",
          "secrets sent with a spec need a token with scope 'write'; diff without them (unset their variables)",
        );
      }
      const diff = await diffFleetSpec(c.env, fleet, input, c.req.valid("query").prune === "true");
      if (diff.etag) c.header("ETag", diff.etag);
      return c.json(diff, 200);
    },
  )
  .openapi(
    createRoute({
      method: "put",
      path: "/{fleet}/spec",
      operationId: "applyFleetSpec",
      tags: ["fleet specs"],
      summary:
        "Apply a spec, all or nothing; with If-Match, only to the fleet as that ETag names it; a missing fleet is created",
      description:
        "One D1 batch with one audit entry and one planner run; reboot groups reach the coordinator through a fleet task. " +
        "Without prune, items the spec does not list are left and listed as unlisted. A fleet that does not exist is created " +
        "from the spec (201), unless If-Match is given (412: a missing fleet matches no tag, not even *); " +
        "If-None-Match: * creates only (412 when the fleet exists).",
      security: bearer,
      middleware: [requireScope("write")] as const,
      request: {
        params: fleetParam,
        query: specQuery,
        headers: z.object({
          "if-match": z
            .string()
            .optional()
            .openapi({ description: "The ETag of GET …/spec or of a diff; * for any existing fleet" }),
          "if-none-match": z
            .string()
            .optional()
            .openapi({ description: "*: only create the fleet (412 when it exists)" }),
        }),
        body: jsonBody(SpecRequest),
      },
      responses: {
        200: {
          ...jsonResponse(SpecApplied, "Applied (or equal: changed false); `etag` is the fleet's spec tag now"),
          headers: specTag,
        },
        201: {
          ...jsonResponse(SpecApplied, "The fleet did not exist and was created from the spec"),
          headers: specTag.extend(locationHeader("The fleet the spec created").shape),
        },
        ...commonErrors,
        ...notFoundError,
        ...conflictError("concurrent_change: the fleet kept changing; retry"),
        ...preconditionError(
          "precondition_failed: the fleet's spec is no longer the one If-Match names, If-Match named a fleet that does not exist, or If-None-Match: * found one; nothing changed",
        ),
        ...invalidSpec,
      },
    }),
    async (c) => {
      const { fleet } = c.req.valid("param");
      const out = await applyFleetSpec(
        c.env,
        backgroundOf(c),
        actorOf(c.var.principal),
        fleet,
        unwrapRequest(c.req.valid("json")),
        {
          prune: c.req.valid("query").prune === "true",
          ifMatch: c.req.valid("header")["if-match"],
          ifNoneMatch: c.req.valid("header")["if-none-match"],
          // requireScope("write") let only an operator through.
          applier: c.var.principal.kind === "operator" ? c.var.principal.scope : "read",
        },
      );
      c.header("ETag", out.etag);
      if (!out.created) return c.json(out, 200);
      c.header("Location", `/v1/fleets/${encodeURIComponent(fleet)}`);
      return c.json(out, 201);
    },
  );
