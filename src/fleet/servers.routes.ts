import { createRoute, OpenAPIHono, z } from "@hono/zod-openapi";
import { eq } from "drizzle-orm";
import { actorOf, requireScope } from "../auth/principal";
import { getDb } from "../db/client";
import { notFound } from "../http/errors";
import { bearer, commonErrors, conflictError, jsonBody, jsonResponse, notFoundError } from "../http/openapi";
import { cursorParam, decodeCursor, limitParam, page } from "../http/paging";
import type { AppEnv } from "../http/types";
import { validationHook } from "../http/validation";
import { DesiredConfig, DesiredConfigInput, serverStatus } from "../ledger/schemas";
import { ledgerOf } from "../ledger/stub";
import { ServerRebootPatch } from "../fleetlock/schemas";
import { patchServerIdentity, putDesiredConfig, registerServer } from "../services/servers";
import { fleetId, serverState, ServerCreated, ServerDetail, ServerInput, serverIdParam, ServerSummary } from "./schemas";
import { listServers, serverDetail, serverSummary } from "./servers";

// One chain, so the type of serverRoutes (and of the app that mounts it at /v1/servers) carries every route for hc.
export const serverRoutes = new OpenAPIHono<AppEnv>({ defaultHook: validationHook })
.openapi(
  createRoute({
    method: "post",
    path: "/",
    tags: ["servers"],
    summary: "Register a server; its token is returned once",
    security: bearer,
    middleware: [requireScope("write")] as const,
    request: { body: jsonBody(ServerInput) },
    responses: {
      201: jsonResponse(ServerCreated, "The server, with its token"),
      ...commonErrors,
      ...conflictError("Another server of the fleet has this fleetlock_id"),
      422: jsonResponse(z.object({ error: z.any() }), "The fleet does not exist"),
    },
  }),
  async (c) => {
    const { view, token } = await registerServer(c.env, actorOf(c.var.principal), c.req.valid("json"));
    return c.json({ ...serverDetail(view), token }, 201);
  },
)

.openapi(
  createRoute({
    method: "get",
    path: "/{id}",
    tags: ["servers"],
    summary: "A server with its desired config, last report and computed status",
    security: bearer,
    middleware: [requireScope("read")] as const,
    request: { params: serverIdParam },
    responses: { 200: jsonResponse(ServerDetail, "The server"), ...commonErrors, ...notFoundError },
  }),
  async (c) => {
    const { id } = c.req.valid("param");
    const view = await ledgerOf(c.env, id).view();
    if (!view) throw notFound("server", id);
    return c.json(serverDetail(view), 200);
  },
)

.openapi(
  createRoute({
    method: "get",
    path: "/",
    tags: ["servers"],
    summary: "Search servers (from the fleet-wide index)",
    security: bearer,
    middleware: [requireScope("read")] as const,
    request: {
      query: z.object({
        fleet: fleetId.optional(),
        status: serverStatus.optional(),
        state: serverState.optional().openapi({ description: "removed servers (tombstones) are listed only with state=removed" }),
        limit: limitParam,
        cursor: cursorParam,
      }),
    },
    responses: {
      200: jsonResponse(
        z.object({ items: z.array(ServerSummary), next_cursor: z.string().nullable() }),
        "A page of servers",
      ),
      ...commonErrors,
    },
  }),
  async (c) => {
    const { fleet, status, state, limit, cursor } = c.req.valid("query");
    const after = decodeCursor(cursor, 1);
    const rows = await listServers(getDb(c.env.DB), { fleet, status, state }, after?.[0] ?? null, limit);
    const { items, next_cursor } = page(rows, limit, (r) => [r.id]);
    return c.json({ items: items.map(serverSummary), next_cursor }, 200);
  },
)

.openapi(
  createRoute({
    method: "put",
    path: "/{id}/desired",
    tags: ["servers"],
    summary: "Set a server's desired config (generation rules: DESIGN §4)",
    security: bearer,
    middleware: [requireScope("write")] as const,
    request: { params: serverIdParam, body: jsonBody(DesiredConfigInput) },
    responses: {
      200: jsonResponse(DesiredConfig, "The config now in force (new, or identical to the one sent)"),
      ...commonErrors,
      ...notFoundError,
      ...conflictError("generation_conflict or stale_generation"),
    },
  }),
  async (c) => {
    const { id } = c.req.valid("param");
    const input = c.req.valid("json");
    const result = await putDesiredConfig(c.env, actorOf(c.var.principal), id, input);
    return c.json(result.config, 200);
  },
)

.openapi(
  createRoute({
    method: "get",
    path: "/{id}/desired",
    tags: ["servers"],
    summary: "A server's desired config",
    security: bearer,
    middleware: [requireScope("read")] as const,
    request: { params: serverIdParam },
    responses: { 200: jsonResponse(DesiredConfig, "The desired config"), ...commonErrors, ...notFoundError },
  }),
  async (c) => {
    const { id } = c.req.valid("param");
    const view = await ledgerOf(c.env, id).view();
    if (!view) throw notFound("server", id);
    return c.json(view.desired, 200);
  },
)

.openapi(
  createRoute({
    method: "patch",
    path: "/{id}",
    tags: ["servers"],
    summary: "Change a server's FleetLock id and/or reboot group",
    security: bearer,
    middleware: [requireScope("write")] as const,
    request: { params: serverIdParam, body: jsonBody(ServerRebootPatch) },
    responses: {
      200: jsonResponse(ServerDetail, "The server"),
      ...commonErrors,
      ...notFoundError,
      ...conflictError("Another server of the fleet has this fleetlock_id"),
    },
  }),
  async (c) => {
    const { id } = c.req.valid("param");
    const view = await patchServerIdentity(c.env, actorOf(c.var.principal), id, c.req.valid("json"));
    return c.json(serverDetail(view), 200);
  },
);
