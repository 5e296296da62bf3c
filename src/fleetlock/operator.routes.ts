import { createRoute, OpenAPIHono, z } from "@hono/zod-openapi";
import { eq } from "drizzle-orm";
import { actorOf, requireScope } from "../auth/principal";
import { audit, auditInsert } from "../audit/log";
import { getDb } from "../db/client";
import { fleets } from "../db/schema";
import { getFleet } from "../fleet/fleets";
import { fleetId, fleetlockId, groupName } from "../fleet/schemas";
import { ApiError, notFound, unwrap } from "../http/errors";
import { bearer, commonErrors, jsonBody, jsonResponse, notFoundError } from "../http/openapi";
import type { AppEnv } from "../http/types";
import { validationHook } from "../http/validation";
import type { Env } from "../env";
import { randomSecret, sha256Hex } from "../lib/crypto";
import { FleetlockKeyCreated, GroupInput, GroupSchema } from "./schemas";
import { coordinatorOf, fleetSettings } from "./stub";


const fleetParam = z.object({ fleet: fleetId });
const groupParams = fleetParam.extend({ group: groupName });
const holderParams = groupParams.extend({ id: fleetlockId });

/** The fleet's row from D1 (operator calls only), or 404; its settings travel with each call. */
async function fleetOf(env: Env, id: string) {
  const row = await getFleet(getDb(env.DB), id);
  if (!row) throw notFound("fleet", id);
  return row;
}

// One chain, so the type of rebootGroupRoutes (and of the app that mounts it at /v1/fleets) carries every route for hc.
export const rebootGroupRoutes = new OpenAPIHono<AppEnv>({ defaultHook: validationHook })
.openapi(
  createRoute({
    method: "get",
    path: "/{fleet}/reboot-groups",
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
    const row = await fleetOf(c.env, fleet);
    const items = await coordinatorOf(c.env, fleet).listGroups(fleetSettings(row));
    return c.json({ fleet, lock_ttl_s: row.lockTtlS, items }, 200);
  },
)

.openapi(
  createRoute({
    method: "get",
    path: "/{fleet}/reboot-groups/{group}",
    tags: ["reboot coordination"],
    summary: "One reboot group",
    security: bearer,
    middleware: [requireScope("read")] as const,
    request: { params: groupParams },
    responses: { 200: jsonResponse(GroupSchema, "The group"), ...commonErrors, ...notFoundError },
  }),
  async (c) => {
    const { fleet, group } = c.req.valid("param");
    const row = await fleetOf(c.env, fleet);
    const result = unwrap(await coordinatorOf(c.env, fleet).getGroup(fleetSettings(row), group));
    return c.json(result.group, 200);
  },
)

.openapi(
  createRoute({
    method: "put",
    path: "/{fleet}/reboot-groups/{group}",
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
    const row = await fleetOf(c.env, fleet);
    const view = await coordinatorOf(c.env, fleet).putGroup(fleetSettings(row), group, input);
    await audit(getDb(c.env.DB), {
      actor: actorOf(c.var.principal),
      action: "reboot_group.put",
      target: `fleet:${fleet}`,
      details: { group, ...input },
    });
    return c.json(view, 200);
  },
)

.openapi(
  createRoute({
    method: "delete",
    path: "/{fleet}/reboot-groups/{group}/holders/{id}",
    tags: ["reboot coordination"],
    summary: "Force-release one holder's slot (audited)",
    security: bearer,
    middleware: [requireScope("write")] as const,
    request: { params: holderParams },
    responses: {
      200: jsonResponse(
        z.object({ released: z.object({ id: z.string(), server_id: z.string().nullable(), granted_at: z.string() }), group: GroupSchema }),
        "Released; the group as it now is",
      ),
      ...commonErrors,
      404: jsonResponse(z.object({ error: z.any() }), "No such fleet or group, or the id holds no slot in it"),
    },
  }),
  async (c) => {
    const { fleet, group, id } = c.req.valid("param");
    const row = await fleetOf(c.env, fleet);
    const result = unwrap(await coordinatorOf(c.env, fleet).forceRelease(fleetSettings(row), group, id));
    const released = {
      id: result.released.id,
      server_id: result.released.server_id,
      granted_at: new Date(result.released.granted_at).toISOString(),
    };
    await audit(getDb(c.env.DB), {
      actor: actorOf(c.var.principal),
      action: "reboot_group.force_release",
      target: `fleet:${fleet}`,
      details: { group, ...released },
    });
    return c.json({ released, group: result.group }, 200);
  },
)

.openapi(
  createRoute({
    method: "post",
    path: "/{fleet}/fleetlock-key",
    tags: ["reboot coordination"],
    summary: "Create or rotate the fleet's FleetLock key; the previous key stops working at once",
    description: "Returns the key once, inside the base_url hosts put in their Zincati config.",
    security: bearer,
    middleware: [requireScope("admin")] as const,
    request: { params: fleetParam },
    responses: { 201: jsonResponse(FleetlockKeyCreated, "The new key and base_url"), ...commonErrors, ...notFoundError },
  }),
  async (c) => {
    const { fleet } = c.req.valid("param");
    const row = await fleetOf(c.env, fleet);
    const key = randomSecret();
    const hash = await sha256Hex(key);
    const db = getDb(c.env.DB);
    // D1 first: if the coordinator then fails, the old key still works and a retry converges.
    await db.batch([
      db.update(fleets).set({ fleetlockKeyHash: hash }).where(eq(fleets.id, fleet)),
      auditInsert(db, { actor: actorOf(c.var.principal), action: "fleet.fleetlock_key.rotate", target: `fleet:${fleet}` }),
    ]);
    await coordinatorOf(c.env, fleet).setKey(fleetSettings(row), hash);
    const base_url = `${new URL(c.req.url).origin}/fleetlock/${fleet}/${key}/`;
    return c.json({ fleet, key, base_url }, 201);
  },
);
