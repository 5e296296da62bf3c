import { z } from "@hono/zod-openapi";
import { SERVER_KINDS, SERVER_STATES } from "../domain/enums";
import { MAX_FLEETLOCK_ID_LENGTH, MAX_GROUP_NAME_LENGTH, MAX_GROUP_SLOTS } from "../domain/limits";
import { AgentStatusRow, DesiredConfig, serverStatus, StoredReport } from "../ledger/schemas";

export const FLEET_ID = /^[a-z0-9][a-z0-9-]{0,62}$/;
export const GROUP_NAME = /^[a-zA-Z0-9.-]+$/;

export const fleetId = z.string().regex(FLEET_ID, "fleet ids are 1-63 chars of a-z, 0-9 and '-'");
const capabilityName = z.string().regex(/^[a-z][a-z0-9_]{0,62}$/);
export const groupName = z.string().max(MAX_GROUP_NAME_LENGTH).regex(GROUP_NAME, "group names match ^[a-zA-Z0-9.-]+$");

export const FleetInput = z
  .strictObject({
    id: fleetId,
    capabilities: z.record(capabilityName, z.boolean()).default({}),
    stale_after_s: z.number().int().min(10).max(7 * 86400).default(300),
    lock_ttl_s: z.number().int().min(60).max(30 * 86400).default(3600),
    allow_unknown_ids: z.boolean().default(false),
    default_group_slots: z.number().int().min(1).max(MAX_GROUP_SLOTS).nullable().default(null),
  })
  .openapi("FleetInput");

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
const roleName = z.string().regex(/^[a-z0-9][a-z0-9._-]{0,62}$/);

export const ServerInput = z
  .strictObject({
    fleet: fleetId,
    hostname,
    kind: serverKind,
    roles: z.array(roleName).max(64).default([]),
    reboot_group: groupName.default("default"),
    fleetlock_id: fleetlockId.optional(),
  })
  .openapi("ServerInput");

const serverState = z.enum(SERVER_STATES);

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
}).openapi("Server");

export const ServerCreated = ServerDetail.extend({
  token: z.string().openapi({ description: "The server's bearer token. Shown only here." }),
}).openapi("ServerCreated");

export const serverIdParam = z.object({ id: z.uuid() });
