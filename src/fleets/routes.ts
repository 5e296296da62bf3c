import { createRoute, OpenAPIHono, z } from "@hono/zod-openapi";
import { actorOf, requireScope } from "../auth/principal";
import { auditInsert } from "../audit/log";
import { getDb } from "../db/client";
import { isUniqueViolation } from "../db/errors";
import { fleets } from "../db/schema";
import { ApiError, notFound } from "../http/errors";
import { locationOfCreated } from "../http/location";
import { bearer, createdResponse, commonErrors, conflictError, jsonBody, jsonResponse, notFoundError } from "../http/openapi";
import { cursorParam, decodeCursor, limitParam, page } from "../http/paging";
import type { AppEnv } from "../http/types";
import { validationHook } from "../http/validation";
import { fleetView, getFleet, listFleets } from "./store";
import { deleteFleet, removalPending, runFleetTasks } from "./tasks";
import { patchFleet } from "../intent/service";
import { planAfterChange } from "../planner/service";
import { Fleet, FleetInput, FleetPatch, fleetId } from "./schemas";

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
    const db = getDb(c.env.DB);
    if (await removalPending(db, input.id)) {
      throw new ApiError(409, "fleet_removal_pending", `fleet '${input.id}' was deleted and is still being cleaned up; retry shortly`);
    }
    const row = {
      id: input.id,
      capabilities: input.capabilities,
      staleAfterS: input.stale_after_s,
      lockTtlS: input.lock_ttl_s,
      allowUnknownIds: input.allow_unknown_ids,
      defaultGroupSlots: input.default_group_slots,
      createdAt: Date.now(),
    };
    try {
      // One batch: the fleet and its audit row commit together or not at all.
      await db.batch([
        db.insert(fleets).values(row),
        auditInsert(db, { actor: actorOf(c.var.principal), action: "fleet.create", target: `fleet:${input.id}`, details: input }),
      ]);
    } catch (err) {
      if (isUniqueViolation(err)) throw new ApiError(409, "already_exists", `fleet '${input.id}' already exists`);
      throw err;
    }
    return c.json(fleetView({ ...row, fleetlockKeyHash: null }), 201);
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
    const row = await getFleet(getDb(c.env.DB), id);
    if (!row) throw notFound("fleet", id);
    return c.json(fleetView(row), 200);
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
    const rows = await listFleets(getDb(c.env.DB), after?.[0] ?? null, limit);
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
    const out = await patchFleet(getDb(c.env.DB), actorOf(c.var.principal), id, c.req.valid("json"));
    if (out.changed.settings) await runFleetTasks(c.env, { fleet: id });
    if (out.changed.capabilities || out.fleet.staleAfterS !== out.before.staleAfterS) await planAfterChange(c.env, c.executionCtx, id);
    return c.json(fleetView(out.fleet), 200);
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
