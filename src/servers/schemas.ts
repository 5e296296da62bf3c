import { z } from "@hono/zod-openapi";
import { LIFECYCLE_ORDERS, PLAN_MODES, SERVER_KINDS, SERVER_STATES } from "../domain/enums";
import { MAX_REASON_LENGTH, MAX_SERVER_ROLES, MAX_WAIT_S } from "../domain/limits";
import { fleetId, fleetlockId, groupName, roleName } from "../fleets/schemas";
import { AgentStatusRow, DesiredConfig, serverStatus, StoredReport } from "../ledger/schemas";

const hostname = z
  .string()
  .max(253)
  .regex(
    /^(?=.{1,253}$)[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*$/,
    "not a valid hostname",
  );
const serverKind = z.enum(SERVER_KINDS);

export const ServerInput = z
  .strictObject({
    fleet: fleetId,
    hostname,
    kind: serverKind.default("managed").openapi({
      description: "managed (provisioned for us: decommission terminates) or manual (borrowed: decommission uninstalls, when nothing is assigned)",
    }),
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

/** GET /v1/servers/{id}?wait=S: documented by hand, validated by the handler (see the route). */
export const serverWaitQuery = z.object({ wait: z.coerce.number().int().min(0).max(MAX_WAIT_S).default(0) });

/** PATCH /v1/servers/{id}: its reboot identity (FleetLock id, reboot group) and/or its roles. */
export const ServerPatch = z
  .strictObject({
    fleetlock_id: fleetlockId
      .nullable()
      .optional()
      .openapi({ description: "The id the server's FleetLock client sends; null clears it" }),
    reboot_group: groupName.optional(),
    roles: z
      .array(roleName)
      .max(MAX_SERVER_ROLES)
      .optional()
      .openapi({ description: "The server's roles (replaced); the server is re-planned unless pinned" }),
  })
  .refine((p) => p.fleetlock_id !== undefined || p.reboot_group !== undefined || p.roles !== undefined, {
    message: "send fleetlock_id, reboot_group and/or roles",
  })
  .openapi("ServerPatch");
export type ServerPatch = z.infer<typeof ServerPatch>;

export const DecommissionInput = z
  .strictObject({
    force: z.boolean().default(false).openapi({ description: "remove a dead host without its acknowledgement (admin only)" }),
    reason: z.string().trim().min(1).max(MAX_REASON_LENGTH).optional().openapi({ description: "required with force; audited" }),
  })
  .refine((b) => !b.force || b.reason !== undefined, { message: "force needs a reason", path: ["reason"] })
  .openapi("DecommissionInput");
export type DecommissionInput = z.infer<typeof DecommissionInput>;
