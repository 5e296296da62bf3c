import { createRoute, OpenAPIHono, z } from "@hono/zod-openapi";
import { requireScope } from "../auth/principal";
import { DomainError } from "../domain/errors";
import { actorOf, fleetAllowed, visibleFleets } from "../domain/principal";
import { locationOfCreated } from "../http/location";
import {
  bearer,
  createdResponse,
  commonErrors,
  conflictError,
  jsonBody,
  jsonResponse,
  notFoundError,
} from "../http/openapi";
import { cursorParam, decodeCursor, limitParam, page } from "../http/paging";
import type { AppEnv } from "../http/types";
import { backgroundOf } from "../http/background";
import { validationHook } from "../http/validation";
import { fleetId } from "../model/fleet";
import { Fleet, FleetInput, FleetPatch } from "./schemas";
import { createFleet, deleteFleet, fleetById, searchFleets, updateFleet } from "./service";
import { fleetView } from "./store";

// One chain, so the type of fleetRoutes (and of the app that mounts it at /v1/fleets) carries every route for hc.
export const fleetRoutes = new OpenAPIHono<AppEnv>({ defaultHook: validationHook })
  .openapi(
    createRoute({
      method: "post",
      path: "/",
      operationId: "createFleet",
      tags: ["fleets"],
      summary: "Create a fleet",
      security: bearer,
      middleware: [requireScope("write"), locationOfCreated] as const,
      request: { body: jsonBody(FleetInput) },
      responses: {
        201: createdResponse(Fleet, "The fleet"),
        ...commonErrors,
        ...conflictError("A fleet with this id exists"),
      },
    }),
    async (c) => {
      const input = c.req.valid("json");
      // Decided by the token's own list alone, whether the fleet exists or not: nothing is confirmed.
      if (!fleetAllowed(c.var.principal, input.id)) {
        throw new DomainError("forbidden", "this token may create only the fleets it names");
      }
      const row = await createFleet(c.env, actorOf(c.var.principal), input);
      return c.json(fleetView(row), 201);
    },
  )

  .openapi(
    createRoute({
      method: "get",
      path: "/{id}",
      operationId: "getFleet",
      tags: ["fleets"],
      summary: "Get a fleet",
      security: bearer,
      middleware: [requireScope("read")] as const,
      request: { params: z.object({ id: fleetId }) },
      responses: { 200: jsonResponse(Fleet, "The fleet"), ...commonErrors, ...notFoundError },
    }),
    async (c) => {
      const { id } = c.req.valid("param");
      return c.json(fleetView(await fleetById(c.env, id)), 200);
    },
  )

  .openapi(
    createRoute({
      method: "get",
      path: "/",
      operationId: "listFleets",
      tags: ["fleets"],
      summary: "List fleets",
      security: bearer,
      middleware: [requireScope("read")] as const,
      request: { query: z.object({ limit: limitParam, cursor: cursorParam }) },
      responses: {
        200: jsonResponse(z.object({ items: z.array(Fleet), next_cursor: z.string().nullable() }), "A page of fleets"),
        ...commonErrors,
      },
    }),
    async (c) => {
      const { limit, cursor } = c.req.valid("query");
      const after = decodeCursor(cursor, 1);
      const rows = await searchFleets(c.env, visibleFleets(c.var.principal), after?.[0] ?? null, limit);
      const { items, next_cursor } = page(rows, limit, (r) => [r.id]);
      return c.json({ items: items.map(fleetView), next_cursor }, 200);
    },
  )

  .openapi(
    createRoute({
      method: "patch",
      path: "/{id}",
      operationId: "patchFleet",
      tags: ["fleets"],
      summary: "Change a fleet's capabilities (merged; a key set to null is removed) and settings",
      security: bearer,
      middleware: [requireScope("write")] as const,
      request: { params: z.object({ id: fleetId }), body: jsonBody(FleetPatch) },
      responses: {
        200: jsonResponse(Fleet, "The fleet as it is now"),
        ...commonErrors,
        ...notFoundError,
        ...conflictError("too_many_capabilities, or concurrent_change"),
      },
    }),
    async (c) => {
      const { id } = c.req.valid("param");
      const fleet = await updateFleet(c.env, backgroundOf(c), actorOf(c.var.principal), id, c.req.valid("json"));
      return c.json(fleetView(fleet), 200);
    },
  )

  .openapi(
    createRoute({
      method: "delete",
      path: "/{id}",
      operationId: "deleteFleet",
      tags: ["fleets"],
      summary: "Delete a fleet whose servers are all removed (their tombstones go with it)",
      security: bearer,
      middleware: [requireScope("admin")] as const,
      request: { params: z.object({ id: fleetId }) },
      responses: {
        204: { description: "Deleted" },
        ...commonErrors,
        ...notFoundError,
        ...conflictError("fleet_not_empty: names the servers that are not removed"),
      },
    }),
    async (c) => {
      const { id } = c.req.valid("param");
      await deleteFleet(c.env, actorOf(c.var.principal), id);
      return c.body(null, 204);
    },
  );
