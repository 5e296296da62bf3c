import { createRoute, OpenAPIHono, z } from "@hono/zod-openapi";
import { requireScope } from "../auth/principal";
import { actorOf } from "../domain/principal";
import { fleetlockId, fleetParam, groupName } from "../fleets/schemas";
import {
  bearer,
  commonErrors,
  conflictError,
  createdResponse,
  jsonBody,
  jsonResponse,
  notFoundBecause,
  notFoundError,
} from "../http/openapi";
import type { AppEnv } from "../http/types";
import { validationHook } from "../http/validation";
import { FixHoldList, FixHoldSchema, FleetlockKeyCreated, GroupInput, GroupSchema } from "./schemas";
import {
  dequeueHost,
  forceRelease,
  getGroup,
  listFixHolds,
  listGroups,
  putGroup,
  releaseFixHold,
  rotateFleetlockKey,
} from "./service";

const groupParams = fleetParam.extend({ group: groupName });
// A FleetLock id, or the server holding under one: its id, hostname or fleet/hostname (./named.ts).
const holderParams = groupParams.extend({
  id: fleetlockId.openapi({ description: "The FleetLock id, or the server's id, hostname or fleet/hostname" }),
});
const fixHoldParams = fleetParam.extend({
  server: fleetlockId.openapi({ description: "The server's id, hostname or fleet/hostname" }),
});

// One chain, so the type of rebootGroupRoutes (and of the app that mounts it at /v1/fleets) carries every route for hc.
export const rebootGroupRoutes = new OpenAPIHono<AppEnv>({ defaultHook: validationHook })
  .openapi(
    createRoute({
      method: "get",
      path: "/{fleet}/reboot-groups",
      operationId: "listRebootGroups",
      tags: ["reboot coordination"],
      summary: "The fleet's reboot groups: slots, pause, windows, holders (with their server) and stuck flags",
      security: bearer,
      middleware: [requireScope("read")] as const,
      request: { params: fleetParam },
      responses: {
        200: jsonResponse(
          z.object({ fleet: z.string(), lock_ttl_s: z.number().int(), items: z.array(GroupSchema) }),
          "The groups",
        ),
        ...commonErrors,
        ...notFoundError,
      },
    }),
    async (c) => {
      const { fleet } = c.req.valid("param");
      const { row, items } = await listGroups(c.env, fleet);
      return c.json({ fleet, lock_ttl_s: row.lockTtlS, items }, 200);
    },
  )

  .openapi(
    createRoute({
      method: "get",
      path: "/{fleet}/reboot-groups/{group}",
      operationId: "getRebootGroup",
      tags: ["reboot coordination"],
      summary: "One reboot group",
      security: bearer,
      middleware: [requireScope("read")] as const,
      request: { params: groupParams },
      responses: { 200: jsonResponse(GroupSchema, "The group"), ...commonErrors, ...notFoundError },
    }),
    async (c) => {
      const { fleet, group } = c.req.valid("param");
      return c.json(await getGroup(c.env, fleet, group), 200);
    },
  )

  .openapi(
    createRoute({
      method: "put",
      path: "/{fleet}/reboot-groups/{group}",
      operationId: "putRebootGroup",
      tags: ["reboot coordination"],
      summary: "Create or change a reboot group live; shrinking never evicts holders",
      security: bearer,
      middleware: [requireScope("write")] as const,
      request: { params: groupParams, body: jsonBody(GroupInput) },
      responses: { 200: jsonResponse(GroupSchema, "The group as it now is"), ...commonErrors, ...notFoundError },
    }),
    async (c) => {
      const { fleet, group } = c.req.valid("param");
      const input = c.req.valid("json");
      return c.json(await putGroup(c.env, actorOf(c.var.principal), fleet, group, input), 200);
    },
  )

  .openapi(
    createRoute({
      method: "delete",
      path: "/{fleet}/reboot-groups/{group}/holders/{id}",
      operationId: "releaseRebootHolder",
      tags: ["reboot coordination"],
      summary: "Force-release one holder's slot (audited)",
      security: bearer,
      middleware: [requireScope("write")] as const,
      request: { params: holderParams },
      responses: {
        200: jsonResponse(
          z.object({
            released: z.object({ id: z.string(), server_id: z.string().nullable(), granted_at: z.string() }),
            group: GroupSchema,
          }),
          "Released; the group as it now is",
        ),
        ...commonErrors,
        ...notFoundBecause(
          "No such fleet or group, or nothing the id names (as a FleetLock id, server id or hostname) holds a slot in it",
        ),
      },
    }),
    async (c) => {
      const { fleet, group, id } = c.req.valid("param");
      const result = await forceRelease(c.env, actorOf(c.var.principal), fleet, group, id);
      const released = {
        id: result.released.id,
        server_id: result.released.server_id,
        granted_at: new Date(result.released.granted_at).toISOString(),
      };
      return c.json({ released, group: result.group }, 200);
    },
  )

  .openapi(
    createRoute({
      method: "delete",
      path: "/{fleet}/reboot-groups/{group}/queue/{id}",
      operationId: "dequeueRebootHost",
      tags: ["reboot coordination"],
      summary: "Take a parked host out of the group's queue (audited); its waiting pre-reboot is refused",
      description:
        "The host keeps no place: its next pre-reboot queues anew at the back (or is granted, if the group is free).",
      security: bearer,
      middleware: [requireScope("write")] as const,
      request: { params: holderParams },
      responses: {
        200: jsonResponse(
          z.object({
            removed: z.object({ id: z.string(), server_id: z.string().nullable(), waiting_since: z.string() }),
            group: GroupSchema,
          }),
          "Taken out; the group as it now is",
        ),
        ...commonErrors,
        ...notFoundBecause(
          "No such fleet or group, or nothing the id names (as a FleetLock id, server id or hostname) waits in its queue",
        ),
      },
    }),
    async (c) => {
      const { fleet, group, id } = c.req.valid("param");
      const result = await dequeueHost(c.env, actorOf(c.var.principal), fleet, group, id);
      const removed = {
        id: result.removed.id,
        server_id: result.removed.server_id,
        waiting_since: new Date(result.removed.since).toISOString(),
      };
      return c.json({ removed, group: result.group }, 200);
    },
  )

  .openapi(
    createRoute({
      method: "get",
      path: "/{fleet}/fix-holds",
      operationId: "listFixHolds",
      tags: ["reboot coordination"],
      summary:
        "What drift fixes hold of the fleet's disruption budget: each server's unit, its state and when it settles",
      security: bearer,
      middleware: [requireScope("read")] as const,
      request: { params: fleetParam },
      responses: { 200: jsonResponse(FixHoldList, "The fixes' units"), ...commonErrors, ...notFoundError },
    }),
    async (c) => {
      const { fleet } = c.req.valid("param");
      const { items } = await listFixHolds(c.env, fleet);
      return c.json({ fleet, items }, 200);
    },
  )

  .openapi(
    createRoute({
      method: "delete",
      path: "/{fleet}/fix-holds/{server}",
      operationId: "releaseFixHold",
      tags: ["reboot coordination"],
      summary: "Free the budget unit a drift fix holds for a server that never reported realized (audited)",
      description:
        "Frees a hold whose write is known (`written`) or a server its bound counted failed (`counted_failed`). A hold " +
        "a fix call may still write under (`writing`) is refused with invalid_state: it settles by itself within 2 minutes.",
      security: bearer,
      middleware: [requireScope("write")] as const,
      request: { params: fixHoldParams },
      responses: {
        200: jsonResponse(z.object({ released: FixHoldSchema }), "Freed; what it was"),
        ...commonErrors,
        ...notFoundBecause(
          "No such fleet, or no drift fix holds a unit of it for the server (a server of another fleet included)",
        ),
        ...conflictError("A fix call may still write under the hold (invalid_state)"),
      },
    }),
    async (c) => {
      const { fleet, server } = c.req.valid("param");
      const released = await releaseFixHold(c.env, actorOf(c.var.principal), fleet, server);
      return c.json({ released }, 200);
    },
  )

  .openapi(
    createRoute({
      method: "post",
      path: "/{fleet}/fleetlock-key",
      operationId: "rotateFleetlockKey",
      tags: ["reboot coordination"],
      summary: "Create or rotate the fleet's FleetLock key; the previous key stops working at once",
      description: "Returns the key once, inside the base_url hosts put in their Zincati config.",
      security: bearer,
      middleware: [requireScope("admin")] as const,
      request: { params: fleetParam },
      responses: {
        201: createdResponse(
          FleetlockKeyCreated,
          "The new key and base_url",
          "The fleet the key belongs to (the key itself is never readable again)",
        ),
        ...commonErrors,
        ...notFoundError,
      },
    }),
    async (c) => {
      const { fleet } = c.req.valid("param");
      const key = await rotateFleetlockKey(c.env, actorOf(c.var.principal), fleet);
      const base_url = `${new URL(c.req.url).origin}/fleetlock/${fleet}/${key}/`;
      // The key has no URL of its own (it is never answered again): Location names its fleet.
      c.header("Location", `/v1/fleets/${encodeURIComponent(fleet)}`);
      return c.json({ fleet, key, base_url }, 201);
    },
  );
