import { createRoute, OpenAPIHono, z } from "@hono/zod-openapi";
import { requireScope } from "../auth/principal";
import { actorOf } from "../domain/principal";
import { fleetParam, groupName } from "../fleets/schemas";
import { bearer, commonErrors, jsonBody, jsonResponse, notFoundError } from "../http/openapi";
import type { AppEnv } from "../http/types";
import { validationHook } from "../http/validation";
import { FleetGatesSchema, GateConfigSchema, HoldInput, HoldSchema } from "./gate-schemas";
import { getFleetGates, putFleetGates, setHold } from "./service";

const groupParams = fleetParam.extend({ group: groupName });
const HoldAnswer = z.object({ hold: HoldSchema.nullable() });
const tags = ["reboot coordination"];

/** Health gates and holds; mounted at /v1/fleets. One chain, so hc sees every route. */
export const gateRoutes = new OpenAPIHono<AppEnv>({ defaultHook: validationHook })
  .openapi(
    createRoute({
      method: "get",
      path: "/{fleet}/gates",
      operationId: "getFleetGates",
      tags,
      summary: "The fleet's default gates and hold, what each group's gates say now, and the inputs they read",
      security: bearer,
      middleware: [requireScope("read")] as const,
      request: { params: fleetParam },
      responses: { 200: jsonResponse(FleetGatesSchema, "The gates"), ...commonErrors, ...notFoundError },
    }),
    async (c) => c.json(await getFleetGates(c.env, c.req.valid("param").fleet), 200),
  )
  .openapi(
    createRoute({
      method: "put",
      path: "/{fleet}/gates",
      operationId: "putFleetGates",
      tags,
      summary: "Set the default gates of the fleet's groups (a group with gates of its own keeps them); {} for none",
      security: bearer,
      middleware: [requireScope("write")] as const,
      request: { params: fleetParam, body: jsonBody(GateConfigSchema) },
      responses: {
        200: jsonResponse(FleetGatesSchema, "The gates as they now are"),
        ...commonErrors,
        ...notFoundError,
      },
    }),
    async (c) => {
      const { fleet } = c.req.valid("param");
      return c.json(await putFleetGates(c.env, actorOf(c.var.principal), fleet, c.req.valid("json")), 200);
    },
  )
  .openapi(
    createRoute({
      method: "put",
      path: "/{fleet}/hold",
      operationId: "holdFleet",
      tags,
      summary:
        "Hold every reboot group of the fleet (no new grants; granted slots stay), with a reason and an optional expiry",
      security: bearer,
      middleware: [requireScope("write")] as const,
      request: { params: fleetParam, body: jsonBody(HoldInput) },
      responses: { 200: jsonResponse(HoldAnswer, "The hold"), ...commonErrors, ...notFoundError },
    }),
    async (c) => {
      const { fleet } = c.req.valid("param");
      return c.json({ hold: await setHold(c.env, actorOf(c.var.principal), fleet, null, c.req.valid("json")) }, 200);
    },
  )
  .openapi(
    createRoute({
      method: "delete",
      path: "/{fleet}/hold",
      operationId: "unholdFleet",
      tags,
      summary: "Lift the fleet-wide hold",
      security: bearer,
      middleware: [requireScope("write")] as const,
      request: { params: fleetParam },
      responses: { 200: jsonResponse(HoldAnswer, "No hold any more"), ...commonErrors, ...notFoundError },
    }),
    async (c) =>
      c.json({ hold: await setHold(c.env, actorOf(c.var.principal), c.req.valid("param").fleet, null, null) }, 200),
  )
  .openapi(
    createRoute({
      method: "put",
      path: "/{fleet}/reboot-groups/{group}/hold",
      operationId: "holdRebootGroup",
      tags,
      summary: "Hold one reboot group (no new grants; granted slots stay), with a reason and an optional expiry",
      security: bearer,
      middleware: [requireScope("write")] as const,
      request: { params: groupParams, body: jsonBody(HoldInput) },
      responses: { 200: jsonResponse(HoldAnswer, "The hold"), ...commonErrors, ...notFoundError },
    }),
    async (c) => {
      const { fleet, group } = c.req.valid("param");
      return c.json({ hold: await setHold(c.env, actorOf(c.var.principal), fleet, group, c.req.valid("json")) }, 200);
    },
  )
  .openapi(
    createRoute({
      method: "delete",
      path: "/{fleet}/reboot-groups/{group}/hold",
      operationId: "unholdRebootGroup",
      tags,
      summary: "Lift a reboot group's hold",
      security: bearer,
      middleware: [requireScope("write")] as const,
      request: { params: groupParams },
      responses: { 200: jsonResponse(HoldAnswer, "No hold any more"), ...commonErrors, ...notFoundError },
    }),
    async (c) => {
      const { fleet, group } = c.req.valid("param");
      return c.json({ hold: await setHold(c.env, actorOf(c.var.principal), fleet, group, null) }, 200);
    },
  );
