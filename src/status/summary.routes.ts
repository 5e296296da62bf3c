import { createRoute, OpenAPIHono } from "@hono/zod-openapi";
import { requireScope } from "../auth/principal";
import { bearer, commonErrors, jsonResponse, notFoundError } from "../http/openapi";
import type { AppEnv } from "../http/types";
import { validationHook } from "../http/validation";
import { fleetParam } from "../fleets/schemas";
import { FleetSummary } from "./schemas";
import { fleetSummary } from "./summary";

// One chain, so the type of this router (and of the app that mounts it at /v1/fleets) carries its route for hc.
export const fleetSummaryRoutes = new OpenAPIHono<AppEnv>({ defaultHook: validationHook }).openapi(
  createRoute({
    method: "get",
    path: "/{fleet}/summary",
    operationId: "getFleetSummary",
    tags: ["fleets"],
    summary: "The fleet at a glance: servers by status and state, reboot groups, moving rollouts, data version",
    description:
      "Counts come from aggregates over the fleet-wide index, so the answer costs the same few statements " +
      "for ten servers or ten thousand. What the operator console's overview shows.",
    security: bearer,
    middleware: [requireScope("read")] as const,
    request: { params: fleetParam },
    responses: { 200: jsonResponse(FleetSummary, "The fleet's summary"), ...commonErrors, ...notFoundError },
  }),
  async (c) => c.json(await fleetSummary(c.env, c.req.valid("param").fleet), 200),
);
