import { createRoute, OpenAPIHono, z } from "@hono/zod-openapi";
import { requireScope } from "../auth/principal";
import { actorOf, fleetAllowed, visibleFleets } from "../domain/principal";
import { MAX_WAIT_S } from "../domain/limits";
import { unknownFleet } from "../domain/errors";
import { fleetId } from "../model/fleet";
import { locationOfCreated } from "../http/location";
import {
  bearer,
  createdResponse,
  commonErrors,
  etagHeader,
  conflictError,
  jsonBody,
  jsonResponse,
  notFoundError,
  ErrorSchema,
  unprocessableError,
} from "../http/openapi";
import { cursorParam, decodeCursor, limitParam, page } from "../http/paging";
import type { AppEnv } from "../http/types";
import { parseQuery, validationHook } from "../http/validation";
import { DesiredConfig, DesiredConfigRequest, serverStatus } from "../model/server/schemas";
import { labelQuery } from "../model/server/labels";
import {
  fleetOfHostname,
  ServerCreated,
  ServerDetail,
  ServerInput,
  serverIdParam,
  ServerPatch,
  serverState,
  ServerSummary,
  serverWaitQuery,
} from "./schemas";
import {
  getDesiredConfig,
  patchServer,
  putDesiredConfig,
  registerServer,
  resolveServer,
  searchServers,
  serverIfChanged,
} from "./service";
import { serverDetail, serverSummary } from "./store";

/** The server resource: registration, reading (long-poll included), search, desired config, PATCH. Lifecycle: ./lifecycle.routes.ts. */

// One chain, so the type of serverRoutes (and of the app that mounts it at /v1/servers) carries every route for hc.
export const serverRoutes = new OpenAPIHono<AppEnv>({ defaultHook: validationHook })
  .openapi(
    createRoute({
      method: "post",
      path: "/",
      operationId: "registerServer",
      tags: ["servers"],
      summary: "Register a server; its token is returned once",
      security: bearer,
      middleware: [requireScope("write"), locationOfCreated] as const,
      request: { body: jsonBody(ServerInput) },
      responses: {
        201: createdResponse(ServerCreated, "The server, with its token"),
        ...commonErrors,
        ...conflictError(
          "Another server of the fleet has this fleetlock_id (fleetlock_id_taken) or this hostname (hostname_taken)",
        ),
        ...unprocessableError("The fleet does not exist (`unknown_fleet`)"),
      },
    }),
    async (c) => {
      const input = c.req.valid("json");
      // Exactly what registration answers for a fleet that does not exist.
      if (!fleetAllowed(c.var.principal, input.fleet)) throw unknownFleet(input.fleet);
      const { view, token } = await registerServer(c.env, actorOf(c.var.principal), input);
      return c.json({ ...serverDetail(view), token }, 201);
    },
  )

  .openapi(
    createRoute({
      method: "get",
      path: "/{id}",
      operationId: "getServer",
      tags: ["servers"],
      summary: "A server with its desired config, last report and computed status",
      description:
        "The weak ETag covers the view except the heartbeat. With `If-None-Match` it answers 304 while " +
        "unchanged; with `wait` too it parks until the view changes (a status change, new report " +
        "content or generation) or `wait` seconds pass (at most 60), then answers 200 or 304.",
      security: bearer,
      middleware: [requireScope("read")] as const,
      request: { params: serverIdParam },
      // Documented here but validated in the handler (serverWaitQuery): declared in `request`, they
      // would make every typed-client call of this route pass query and header objects.
      parameters: [
        {
          name: "wait",
          in: "query",
          required: false,
          schema: { type: "integer", minimum: 0, maximum: MAX_WAIT_S, default: 0 },
        },
        fleetOfHostname,
        { name: "If-None-Match", in: "header", required: false, schema: { type: "string" } },
      ],
      responses: {
        200: {
          ...jsonResponse(ServerDetail, "The server"),
          headers: etagHeader("Weak tag of the view, heartbeat excluded"),
        },
        304: {
          description: "Unchanged since the ETag in If-None-Match",
          headers: etagHeader("Weak tag of the view, heartbeat excluded"),
        },
        ...commonErrors,
        ...notFoundError,
        ...conflictError("The hostname names servers in several fleets (ambiguous_server lists them): add ?fleet="),
      },
    }),
    async (c) => {
      const id = await resolveServer(c.env, c.var.principal, c.req.valid("param").id, c.req.query("fleet"));
      const { wait } = parseQuery(serverWaitQuery, c.req.query());
      c.header("Cache-Control", "no-store");
      const { etag, view } = await serverIfChanged(c.env, id, c.req.header("If-None-Match"), wait, c.req.raw.signal);
      c.header("ETag", etag);
      if (!view) return c.body(null, 304);
      return c.json(serverDetail(view), 200);
    },
  )

  .openapi(
    createRoute({
      method: "get",
      path: "/",
      operationId: "listServers",
      tags: ["servers"],
      summary: "Search servers (from the fleet-wide index), by hostname, status, state and labels",
      security: bearer,
      middleware: [requireScope("read")] as const,
      request: {
        query: z.object({
          fleet: fleetId.optional(),
          status: serverStatus.optional(),
          state: serverState
            .optional()
            .openapi({ description: "removed servers (tombstones) are listed only with state=removed" }),
          hostname: z
            .string()
            .max(254)
            .regex(/^[A-Za-z0-9.-]+\*?$/, "a hostname, or a prefix ending in *")
            .optional()
            .openapi({ description: "exact (`node-1.example.com`) or a prefix (`node-1*`)" }),
          label: labelQuery,
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
      const { fleet, status, state, hostname, label, limit, cursor } = c.req.valid("query");
      const after = decodeCursor(cursor, 3);
      const rows = await searchServers(
        c.env,
        { fleet, status, state, hostname, labels: label, visible: visibleFleets(c.var.principal) },
        after ? [after[0], after[1], after[2]] : null,
        limit,
      );
      const { items, next_cursor } = page(rows, limit, (r) => [r.hostnameSort, r.hostname, r.id]);
      return c.json({ items: items.map(serverSummary), next_cursor }, 200);
    },
  )

  .openapi(
    createRoute({
      method: "put",
      path: "/{id}/desired",
      operationId: "putDesiredConfig",
      tags: ["servers"],
      summary: "Set a server's desired config (generation rules: docs/design.md §4)",
      security: bearer,
      middleware: [requireScope("write")] as const,
      request: { params: serverIdParam, body: jsonBody(DesiredConfigRequest) },
      parameters: [fleetOfHostname],
      responses: {
        200: jsonResponse(DesiredConfig, "The config now in force (new, or identical to the one sent)"),
        ...commonErrors,
        ...notFoundError,
        ...conflictError("generation_conflict or stale_generation; ambiguous_server"),
        422: jsonResponse(
          ErrorSchema,
          'An agent names no ready catalog image, by id or, in a fleet with image_policy "catalog", by name and version (`image_not_found`)',
        ),
      },
    }),
    async (c) => {
      const id = await resolveServer(c.env, c.var.principal, c.req.valid("param").id, c.req.query("fleet"));
      const input = c.req.valid("json");
      const result = await putDesiredConfig(c.env, actorOf(c.var.principal), id, input);
      return c.json(result.config, 200);
    },
  )

  .openapi(
    createRoute({
      method: "get",
      path: "/{id}/desired",
      operationId: "getDesiredConfig",
      tags: ["servers"],
      summary: "A server's desired config",
      security: bearer,
      middleware: [requireScope("read")] as const,
      request: { params: serverIdParam },
      parameters: [fleetOfHostname],
      responses: {
        200: jsonResponse(DesiredConfig, "The desired config"),
        ...commonErrors,
        ...notFoundError,
        ...conflictError("The hostname names servers in several fleets (ambiguous_server lists them): add ?fleet="),
      },
    }),
    async (c) => {
      const id = await resolveServer(c.env, c.var.principal, c.req.valid("param").id, c.req.query("fleet"));
      return c.json(await getDesiredConfig(c.env, id), 200);
    },
  )

  .openapi(
    createRoute({
      method: "patch",
      path: "/{id}",
      operationId: "patchServer",
      tags: ["servers"],
      summary:
        "Change a server's FleetLock id, reboot group, roles (a role change re-plans it unless pinned) and/or labels (merged)",
      security: bearer,
      middleware: [requireScope("write")] as const,
      request: { params: serverIdParam, body: jsonBody(ServerPatch) },
      parameters: [fleetOfHostname],
      responses: {
        200: jsonResponse(ServerDetail, "The server"),
        ...commonErrors,
        ...notFoundError,
        ...conflictError("Another server of the fleet has this fleetlock_id"),
      },
    }),
    async (c) => {
      const id = await resolveServer(c.env, c.var.principal, c.req.valid("param").id, c.req.query("fleet"));
      const view = await patchServer(c.env, actorOf(c.var.principal), id, c.req.valid("json"));
      return c.json(serverDetail(view), 200);
    },
  );
