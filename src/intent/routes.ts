import { createRoute, OpenAPIHono, z } from "@hono/zod-openapi";
import { requireScope } from "../auth/principal";
import { actorOf } from "../domain/principal";
import { fleetParam } from "../fleets/schemas";
import { refreshFleet } from "../fleets/service";
import { backgroundOf } from "../http/background";
import { bearer, commonErrors, jsonBody, jsonResponse, notFoundError, unprocessableError } from "../http/openapi";
import { cursorParam, decodeCursor, decodeIdCursor, limitParam, page } from "../http/paging";
import type { AppEnv } from "../http/types";
import { validationHook } from "../http/validation";
import { iso } from "../lib/time";
import { channelsOfFleet, channelWithHistory, deleteRole, putRole, roleOf, rolesOfFleet, setChannel } from "./service";
import {
  PlannerRunSchema,
  Channel,
  ChannelChange,
  ChannelInput,
  channelParams,
  Role,
  RoleInput,
  roleParams,
} from "./schemas";
import { channelView, roleView } from "./store";

const unknownChannel = unprocessableError("An agent has no channel in the fleet (unknown_channel)");
const pageQuery = z.object({ limit: limitParam, cursor: cursorParam });

/** GET /{fleet}/channels and /{fleet}/roles share one shape: a page of the fleet's items, 404 for no such fleet. */
const fleetListRoute = <P extends string, I extends z.ZodType>(
  path: P,
  operationId: string,
  summary: string,
  item: I,
  what: string,
) =>
  createRoute({
    method: "get",
    path,
    operationId,
    tags: ["fleet intent"],
    summary,
    security: bearer,
    middleware: [requireScope("read")] as const,
    request: { params: fleetParam, query: pageQuery },
    responses: {
      200: jsonResponse(z.object({ items: z.array(item), next_cursor: z.string().nullable() }), `A page of ${what}`),
      ...commonErrors,
      ...notFoundError,
    },
  });

// One chain, so the type of this router (and of the app that mounts it) carries every route for hc.
export const intentRoutes = new OpenAPIHono<AppEnv>({ defaultHook: validationHook })
  .openapi(
    createRoute({
      method: "put",
      path: "/{fleet}/channels/{agent}",
      operationId: "putChannel",
      tags: ["fleet intent"],
      summary:
        "Set the image the fleet wants for an agent (new servers and newly added roles get it; running servers do not move)",
      security: bearer,
      middleware: [requireScope("write")] as const,
      request: { params: channelParams, body: jsonBody(ChannelInput) },
      responses: {
        200: jsonResponse(
          Channel.extend({ changed: z.boolean() }),
          "The channel; changed is false when it already held this image",
        ),
        ...commonErrors,
        ...notFoundError,
        ...unprocessableError(
          'The image is no ready catalog image: named by id, or by name and version in a fleet with image_policy "catalog" (`image_not_found`)',
        ),
      },
    }),
    async (c) => {
      const { fleet, agent } = c.req.valid("param");
      const { channel, changed } = await setChannel(
        c.env,
        backgroundOf(c),
        actorOf(c.var.principal),
        fleet,
        agent,
        c.req.valid("json"),
      );
      return c.json({ ...channelView(channel), changed }, 200);
    },
  )
  .openapi(
    fleetListRoute("/{fleet}/channels", "listChannels", "The fleet's agent channels", Channel, "channels"),
    async (c) => {
      const { fleet } = c.req.valid("param");
      return c.json(await channelsOfFleet(c.env, fleet, c.req.valid("query")), 200);
    },
  )
  .openapi(
    createRoute({
      method: "get",
      path: "/{fleet}/channels/{agent}",
      operationId: "getChannel",
      tags: ["fleet intent"],
      summary: "One channel with its history of changes, newest first (paged by cursor)",
      security: bearer,
      middleware: [requireScope("read")] as const,
      request: { params: channelParams, query: pageQuery },
      responses: {
        200: jsonResponse(
          Channel.extend({ history: z.array(ChannelChange), next_cursor: z.string().nullable() }),
          "The channel and a page of its history",
        ),
        ...commonErrors,
        ...notFoundError,
      },
    }),
    async (c) => {
      const { fleet, agent } = c.req.valid("param");
      const { limit, cursor } = c.req.valid("query");
      const before = decodeIdCursor(cursor);
      const { channel, history } = await channelWithHistory(c.env, fleet, agent, before, limit);
      const { items, next_cursor } = page(history, limit, (r) => [String(r.id)]);
      return c.json(
        {
          ...channelView(channel),
          history: items.map((h) => ({
            image: h.image,
            version: h.version,
            previous: h.previousImage != null ? { image: h.previousImage, version: h.previousVersion ?? "" } : null,
            at: iso(h.at),
            actor: h.actor,
          })),
          next_cursor,
        },
        200,
      );
    },
  )
  .openapi(
    createRoute({
      method: "put",
      path: "/{fleet}/roles/{role}",
      operationId: "putRole",
      tags: ["fleet intent"],
      summary:
        "Create or replace a role profile: the agents the role runs, each optionally conditioned on a capability",
      security: bearer,
      middleware: [requireScope("write")] as const,
      request: { params: roleParams, body: jsonBody(RoleInput) },
      responses: {
        200: jsonResponse(
          Role.extend({ changed: z.boolean(), planning: PlannerRunSchema.nullable() }),
          "The role; changed is false when it already was this; planning: the re-planning of the servers with the role",
        ),
        ...commonErrors,
        ...notFoundError,
        ...unknownChannel,
      },
    }),
    async (c) => {
      const { fleet, role } = c.req.valid("param");
      const out = await putRole(c.env, backgroundOf(c), actorOf(c.var.principal), fleet, role, c.req.valid("json"));
      return c.json({ ...roleView(out.role), changed: out.changed, planning: out.planning }, 200);
    },
  )
  .openapi(
    createRoute({
      method: "get",
      path: "/{fleet}/roles/{role}",
      operationId: "getRole",
      tags: ["fleet intent"],
      summary: "A role profile",
      security: bearer,
      middleware: [requireScope("read")] as const,
      request: { params: roleParams },
      responses: { 200: jsonResponse(Role, "The role"), ...commonErrors, ...notFoundError },
    }),
    async (c) => {
      const { fleet, role } = c.req.valid("param");
      return c.json(roleView(await roleOf(c.env, fleet, role)), 200);
    },
  )
  .openapi(fleetListRoute("/{fleet}/roles", "listRoles", "The fleet's role profiles", Role, "roles"), async (c) => {
    const { fleet } = c.req.valid("param");
    return c.json(await rolesOfFleet(c.env, fleet, c.req.valid("query")), 200);
  })
  .openapi(
    createRoute({
      method: "delete",
      path: "/{fleet}/roles/{role}",
      operationId: "deleteRole",
      tags: ["fleet intent"],
      summary: "Delete a role profile (servers with the role no longer get its agents)",
      security: bearer,
      middleware: [requireScope("write")] as const,
      request: { params: roleParams },
      responses: { 204: { description: "Deleted" }, ...commonErrors, ...notFoundError },
    }),
    async (c) => {
      const { fleet, role } = c.req.valid("param");
      await deleteRole(c.env, backgroundOf(c), actorOf(c.var.principal), fleet, role);
      return c.body(null, 204);
    },
  )
  .openapi(
    createRoute({
      method: "post",
      path: "/{fleet}/refresh",
      operationId: "refreshFleet",
      tags: ["fleet intent"],
      summary: "Ask every server of the fleet (one page of it) to report again now",
      description:
        "Each server's next desired poll answers 200 and its parked poll wakes, as with POST /v1/servers/{id}/refresh. " +
        "Paged by server id: pass next_cursor back as cursor for the next page. Removed and decommissioning servers are left out.",
      security: bearer,
      middleware: [requireScope("write")] as const,
      request: { params: fleetParam, query: pageQuery },
      responses: {
        200: jsonResponse(
          z.object({ requested: z.number().int(), failed: z.array(z.string()), next_cursor: z.string().nullable() }),
          "How many servers were asked",
        ),
        ...commonErrors,
        ...notFoundError,
      },
    }),
    async (c) => {
      const { fleet } = c.req.valid("param");
      const { limit, cursor } = c.req.valid("query");
      const after = decodeCursor(cursor, 1);
      const out = await refreshFleet(c.env, actorOf(c.var.principal), fleet, after?.[0] ?? null, limit);
      const { next_cursor } = page(out.rows, limit, (r) => [r.id]);
      return c.json({ requested: out.requested, failed: out.failed, next_cursor }, 200);
    },
  );
