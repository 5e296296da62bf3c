import { createRoute, OpenAPIHono, z } from "@hono/zod-openapi";
import { eq } from "drizzle-orm";
import { actorOf, requireScope } from "../auth/principal";
import { issueToken } from "../auth/tokens";
import { audit, auditInsert } from "../audit/log";
import { getDb } from "../db/client";
import { isUniqueViolation } from "../db/errors";
import { servers, tokens } from "../db/schema";
import { ApiError, notFound, unwrap } from "../http/errors";
import { bearer, commonErrors, conflictError, jsonBody, jsonResponse, notFoundError } from "../http/openapi";
import { cursorParam, decodeCursor, limitParam, page } from "../http/paging";
import type { AppEnv } from "../http/types";
import { validationHook } from "../http/validation";
import type { ServerRecord } from "../ledger/record";
import { DesiredConfig, DesiredConfigInput, serverStatus } from "../ledger/schemas";
import { ledgerOf } from "../ledger/stub";
import { MAX_WAIT_S } from "../ledger/agent.routes";
import { tagMatches, viewTag } from "../ledger/view-tag";
import { pushServerIdentity } from "../fleetlock/registry";
import { ServerRebootPatch } from "../fleetlock/schemas";
import { getFleet } from "./fleets";
import { fleetId, ServerCreated, ServerDetail, ServerInput, serverIdParam, ServerSummary } from "./schemas";
import { listServers, serverDetail, serverSummary } from "./servers";

export const serverRoutes = new OpenAPIHono<AppEnv>({ defaultHook: validationHook });

serverRoutes.openapi(
  createRoute({
    method: "post",
    path: "/v1/servers",
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
    const input = c.req.valid("json");
    const db = getDb(c.env.DB);
    const fleet = await getFleet(db, input.fleet);
    if (!fleet) throw new ApiError(422, "unknown_fleet", `fleet '${input.fleet}' does not exist`);

    const id = crypto.randomUUID();
    const { token, hash } = await issueToken("server", id);
    const now = Date.now();
    const record: ServerRecord = {
      id,
      fleet_id: fleet.id,
      hostname: input.hostname.toLowerCase(),
      kind: input.kind,
      roles: input.roles,
      reboot_group: input.reboot_group,
      fleetlock_id: input.fleetlock_id ?? null,
      state: "provisioning",
      stale_after_s: fleet.staleAfterS,
      created_at: now,
      token_hash: hash,
      token_id: id,
    };
    // The index row goes first so its unique fleetlock_id guard can refuse a duplicate before any
    // ledger exists; the ledger then overwrites the row with its own projection.
    try {
      await db.batch([
        db.insert(servers).values({
          id,
          fleetId: fleet.id,
          hostname: record.hostname,
          kind: record.kind,
          roles: record.roles,
          rebootGroup: record.reboot_group,
          fleetlockId: record.fleetlock_id,
          state: record.state,
          status: "unknown",
          desiredGeneration: 1,
          createdAt: now,
          updatedAt: now,
        }),
        db.insert(tokens).values({
          id,
          kind: "server",
          scope: "server",
          serverId: id,
          name: `server ${record.hostname}`,
          hash,
          createdBy: actorOf(c.var.principal),
          createdAt: now,
        }),
        auditInsert(db, {
          actor: actorOf(c.var.principal),
          action: "server.register",
          target: `server:${id}`,
          details: input,
        }),
      ]);
    } catch (err) {
      if (isUniqueViolation(err)) {
        throw new ApiError(409, "fleetlock_id_taken", `another server of fleet '${fleet.id}' uses fleetlock_id '${input.fleetlock_id}'`);
      }
      throw err;
    }
    let view;
    try {
      // Agents come from the fleet's channels and the server's roles once those exist (planner).
      view = await ledgerOf(c.env, id).register(record, []);
    } catch (err) {
      await db.batch([db.delete(servers).where(eq(servers.id, id)), db.delete(tokens).where(eq(tokens.id, id))]);
      throw err;
    }
    // Never throws: a coordinator that was not told looks the id up in D1 on first use.
    if (record.fleetlock_id) {
      await pushServerIdentity(c.env, fleet.id, id, {
        fleetlock_id: record.fleetlock_id,
        hostname: record.hostname,
        reboot_group: record.reboot_group,
        rev: 0,
      });
    }
    return c.json({ ...serverDetail(view), token }, 201);
  },
);

serverRoutes.openapi(
  createRoute({
    method: "get",
    path: "/v1/servers/{id}",
    tags: ["servers"],
    summary: "A server with its desired config, last report and computed status",
    description:
      "The weak ETag covers the view except the heartbeat. With `If-None-Match` it answers 304 while " +
      "unchanged; with `wait` too it parks until the view changes (a status change, a new report " +
      "content or generation) or `wait` seconds pass (at most 60), then answers 200 or 304.",
    security: bearer,
    middleware: [requireScope("read")] as const,
    request: {
      params: serverIdParam,
      query: z.object({ wait: z.coerce.number().int().min(0).max(MAX_WAIT_S).default(0) }),
      headers: z.object({ "if-none-match": z.string().max(256).optional() }),
    },
    responses: {
      200: jsonResponse(ServerDetail, "The server"),
      304: { description: "Unchanged since the ETag in If-None-Match" },
      ...commonErrors,
      ...notFoundError,
    },
  }),
  async (c) => {
    const { id } = c.req.valid("param");
    const { wait } = c.req.valid("query");
    const known = c.req.header("If-None-Match");
    const ledger = ledgerOf(c.env, id);
    c.header("Cache-Control", "no-store");
    if (known && wait > 0) {
      // Only a single tag can be waited on; a list or `*` is answered at once below.
      const given = known.trim();
      const tag = given.startsWith("W/") ? given : `W/${given}`;
      if (!given.includes(",") && given !== "*") {
        const result = await ledger.viewWait(tag, wait * 1000);
        if (!result) throw notFound("server", id);
        c.header("ETag", result.etag);
        if (!result.changed) return c.body(null, 304);
        return c.json(serverDetail(result.view), 200);
      }
    }
    const view = await ledger.view();
    if (!view) throw notFound("server", id);
    const etag = viewTag(view);
    c.header("ETag", etag);
    if (tagMatches(known, etag)) return c.body(null, 304);
    return c.json(serverDetail(view), 200);
  },
);

serverRoutes.openapi(
  createRoute({
    method: "get",
    path: "/v1/servers",
    tags: ["servers"],
    summary: "Search servers (from the fleet-wide index)",
    security: bearer,
    middleware: [requireScope("read")] as const,
    request: {
      query: z.object({
        fleet: fleetId.optional(),
        status: serverStatus.optional(),
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
    const { fleet, status, limit, cursor } = c.req.valid("query");
    const after = decodeCursor(cursor, 1);
    const rows = await listServers(getDb(c.env.DB), { fleet, status }, after?.[0] ?? null, limit);
    const { items, next_cursor } = page(rows, limit, (r) => [r.id]);
    return c.json({ items: items.map(serverSummary), next_cursor }, 200);
  },
);

serverRoutes.openapi(
  createRoute({
    method: "put",
    path: "/v1/servers/{id}/desired",
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
    const result = unwrap(await ledgerOf(c.env, id).putDesired(input));
    if (result.created) {
      await audit(getDb(c.env.DB), {
        actor: actorOf(c.var.principal),
        action: "server.desired.put",
        target: `server:${id}`,
        details: { generation: result.config.generation, lifecycle: result.config.lifecycle, agents: result.config.agents.length },
      });
    }
    return c.json(result.config, 200);
  },
);

serverRoutes.openapi(
  createRoute({
    method: "get",
    path: "/v1/servers/{id}/desired",
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
);

serverRoutes.openapi(
  createRoute({
    method: "patch",
    path: "/v1/servers/{id}",
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
    const input = c.req.valid("json");
    const ledger = ledgerOf(c.env, id);
    const current = await ledger.view();
    if (!current) throw notFound("server", id);
    const before = { fleetlockId: current.record.fleetlock_id, rebootGroup: current.record.reboot_group };
    const after = {
      fleetlockId: input.fleetlock_id === undefined ? before.fleetlockId : input.fleetlock_id,
      rebootGroup: input.reboot_group ?? before.rebootGroup,
    };
    if (after.fleetlockId === before.fleetlockId && after.rebootGroup === before.rebootGroup) {
      return c.json(serverDetail(current), 200);
    }
    const db = getDb(c.env.DB);
    // The index row first, as at registration: its unique index refuses a fleetlock_id another
    // server of the fleet uses, atomically, before the ledger changes.
    try {
      await db.update(servers).set({ ...after, updatedAt: Date.now() }).where(eq(servers.id, id));
    } catch (err) {
      if (isUniqueViolation(err)) {
        throw new ApiError(409, "fleetlock_id_taken", `another server of fleet '${current.record.fleet_id}' uses fleetlock_id '${after.fleetlockId}'`);
      }
      throw err;
    }
    let result;
    try {
      result = unwrap(await ledger.setRebootIdentity({ fleetlock_id: after.fleetlockId, reboot_group: after.rebootGroup }));
    } catch (err) {
      await db.update(servers).set(before).where(eq(servers.id, id));
      throw err;
    }
    await pushServerIdentity(c.env, current.record.fleet_id, id, {
      fleetlock_id: after.fleetlockId,
      hostname: current.record.hostname,
      reboot_group: after.rebootGroup,
      rev: result.rev,
    });
    await audit(db, {
      actor: actorOf(c.var.principal),
      action: "server.patch",
      target: `server:${id}`,
      details: { before: { fleetlock_id: before.fleetlockId, reboot_group: before.rebootGroup }, after: input },
    });
    return c.json(serverDetail(result.view), 200);
  },
);
