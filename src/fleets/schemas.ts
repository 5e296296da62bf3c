import { z } from "@hono/zod-openapi";
import { LIFECYCLE_ORDERS, PLAN_MODES, SERVER_KINDS, SERVER_STATES } from "../domain/enums";
import { MAX_CAPABILITIES, MAX_FLEETLOCK_ID_LENGTH, MAX_GROUP_NAME_LENGTH, MAX_GROUP_SLOTS, MAX_SERVER_ROLES } from "../domain/limits";
import { AgentStatusRow, DesiredConfig, serverStatus, StoredReport } from "../ledger/schemas";

export const FLEET_ID = /^[a-z0-9][a-z0-9-]{0,62}$/;
export const GROUP_NAME = /^[a-zA-Z0-9.-]+$/;

export const fleetId = z.string().regex(FLEET_ID, "fleet ids are 1-63 chars of a-z, 0-9 and '-'");
export const CAPABILITY_NAME = /^[a-z][a-z0-9_]{0,62}$/;
export const capabilityName = z
  .string()
  .regex(CAPABILITY_NAME, "capability names are 1-63 chars of a-z, 0-9 and '_', starting with a letter");
export const groupName = z.string().max(MAX_GROUP_NAME_LENGTH).regex(GROUP_NAME, "group names match ^[a-zA-Z0-9.-]+$");

/** The fleet's settings, shared by creation (with defaults) and PATCH (each optional). */
const setting = {
  stale_after_s: z.number().int().min(10).max(7 * 86400),
  lock_ttl_s: z.number().int().min(60).max(30 * 86400),
  allow_unknown_ids: z.boolean(),
  default_group_slots: z.number().int().min(1).max(MAX_GROUP_SLOTS).nullable(),
};
const atMostCapabilities = (c: Record<string, unknown>) => Object.keys(c).length <= MAX_CAPABILITIES;

export const FleetInput = z
  .strictObject({
    id: fleetId,
    capabilities: z
      .record(capabilityName, z.boolean())
      .refine(atMostCapabilities, `at most ${MAX_CAPABILITIES} capabilities`)
      .default({}),
    stale_after_s: setting.stale_after_s.default(300),
    lock_ttl_s: setting.lock_ttl_s.default(3600),
    allow_unknown_ids: setting.allow_unknown_ids.default(false),
    default_group_slots: setting.default_group_slots.default(null),
  })
  .openapi("FleetInput");

/**
 * PATCH /v1/fleets/{fleet}: capabilities are merged into the fleet's (a key set to null is removed,
 * as in a JSON merge patch); each setting given replaces the fleet's.
 */
export const FleetPatch = z
  .strictObject({
    capabilities: z
      .record(capabilityName, z.boolean().nullable())
      .refine(atMostCapabilities, `at most ${MAX_CAPABILITIES} capabilities`)
      .optional(),
    stale_after_s: setting.stale_after_s.optional(),
    lock_ttl_s: setting.lock_ttl_s.optional(),
    allow_unknown_ids: setting.allow_unknown_ids.optional(),
    default_group_slots: setting.default_group_slots.optional(),
  })
  .refine((p) => Object.keys(p).length > 0, "name at least one field to change")
  .openapi("FleetPatch");
export type FleetPatch = z.infer<typeof FleetPatch>;

export const Fleet = z
  .object({
    id: z.string(),
    capabilities: z.record(z.string(), z.boolean()),
    stale_after_s: z.number().int(),
    lock_ttl_s: z.number().int(),
    allow_unknown_ids: z.boolean(),
    default_group_slots: z.number().int().nullable(),
    created_at: z.string(),
  })
  .openapi("Fleet");

const hostname = z
  .string()
  .max(253)
  .regex(
    /^(?=.{1,253}$)[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*$/,
    "not a valid hostname",
  );
const serverKind = z.enum(SERVER_KINDS);
/** The id a server's FleetLock client sends (Zincati: its node id); unique per fleet. */
export const fleetlockId = z.string().min(1).max(MAX_FLEETLOCK_ID_LENGTH);
export const roleName = z.string().regex(/^[a-z0-9][a-z0-9._-]{0,62}$/);

export const ServerInput = z
  .strictObject({
    fleet: fleetId,
    hostname,
    kind: serverKind,
    roles: z.array(roleName).max(MAX_SERVER_ROLES).default([]),
    reboot_group: groupName.default("default"),
    fleetlock_id: fleetlockId.optional(),
  })
  .openapi("ServerInput");

export const serverState = z.enum(SERVER_STATES);

export const ServerSummary = z
  .object({
    id: z.string(),
    fleet: z.string(),
    hostname: z.string(),
    kind: serverKind,
    roles: z.array(z.string()),
    reboot_group: z.string(),
    fleetlock_id: z.string().nullable(),
    state: serverState,
    status: serverStatus,
    desired_generation: z.number().int(),
    reported_generation: z.number().int().nullable(),
    last_seen: z.string().nullable(),
  })
  .openapi("ServerSummary");

export const ServerDetail = ServerSummary.extend({
  created_at: z.string(),
  desired: DesiredConfig,
  report: StoredReport.omit({ received_at: true }).extend({ received_at: z.string() }).nullable(),
  agents: z.array(AgentStatusRow),
  planning: z
    .object({
      mode: z.enum(PLAN_MODES).openapi({
        description: "planned: the planner sets the agents; pinned: an operator's PUT desired did, until released",
      }),
      rev: z.number().int().openapi({ description: "the fleet intent revision of the newest inputs the server was offered" }),
      pinned_at: z.string().optional(),
      pinned_by: z.string().optional(),
    })
    .openapi("Planning"),
  lifecycle: z
    .object({
      order: z.enum(LIFECYCLE_ORDERS),
      generation: z.number().int(),
      requested_at: z.string(),
      requested_by: z.string(),
      cleanup_from: z.string().nullable().openapi({ description: "when the host acknowledged (or removal was forced)" }),
      forced: z.object({ by: z.string(), reason: z.string() }).nullable(),
      cleanup_done: z.array(z.string()),
    })
    .nullable()
    .openapi("Lifecycle"),
  refresh: z
    .object({
      requested_at: z.string(),
      requested_by: z.string(),
      answered_at: z.string().nullable().openapi({ description: "the first report after the request" }),
    })
    .nullable()
    .openapi("Refresh"),
}).openapi("Server");

export const ServerCreated = ServerDetail.extend({
  token: z.string().openapi({ description: "The server's bearer token. Shown only here." }),
}).openapi("ServerCreated");

export const serverIdParam = z.object({ id: z.uuid() });
