import { z } from "@hono/zod-openapi";
import { decimalParam } from "../http/paging";
import { LIFECYCLE_ORDERS, PLAN_MODES, SERVER_KINDS, SERVER_STATES } from "../domain/enums";
import { MAX_REASON_LENGTH, MAX_SERVER_ROLES, MAX_WAIT_S } from "../domain/limits";
import { fleetlockId, groupName, roleName } from "../fleets/schemas";
import { fleetId } from "../model/fleet";
import { AgentStatusRow, DesiredConfig, serverStatus, StoredReport } from "../model/server/schemas";
import { labelsPatchSchema, labelsSchema } from "../model/server/labels";
import { HOSTNAME, isServerRef } from "./naming";

const hostname = z.string().max(253).regex(HOSTNAME, "not a valid hostname");
const serverKind = z.enum(SERVER_KINDS);

export const ServerInput = z
  .strictObject({
    fleet: fleetId,
    hostname,
    kind: serverKind.default("managed").openapi({
      description:
        "managed (provisioned for us: decommission terminates) or manual (borrowed: decommission uninstalls, when nothing is assigned)",
    }),
    roles: z.array(roleName).max(MAX_SERVER_ROLES).default([]),
    labels: labelsSchema.default({}),
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
    labels: z.record(z.string(), z.string()),
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
      rev: z
        .number()
        .int()
        .openapi({ description: "the fleet intent revision of the newest inputs the server was offered" }),
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
      cleanup_from: z
        .string()
        .nullable()
        .openapi({ description: "when the host acknowledged (or removal was forced)" }),
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

/** A server's rotated token (POST /v1/servers/{id}/token), shown only in this answer. */
export const ServerToken = z.object({ id: z.string(), token: z.string() });

export const ServerCreated = ServerDetail.extend({
  token: z.string().openapi({ description: "The server's bearer token. Shown only here." }),
}).openapi("ServerCreated");

/** A server named by id, hostname or `fleet/hostname` (./naming.ts). */
export const serverRef = z
  .string()
  .min(1)
  .max(64 + 253)
  .refine(isServerRef, "a server id, a hostname, or fleet/hostname")
  .openapi({
    description: "The server's id, its hostname, or `fleet/hostname` (the slash URL-encoded in a path: `%2F`)",
  });

export const serverIdParam = z.object({ id: serverRef });

/**
 * `?fleet=`: the fleet a hostname is looked up in, for a hostname that names servers in several
 * fleets. Documented by hand and read by `serverIdIn` (declared in `request`, every typed-client
 * call of these routes would have to pass a query object).
 */
export const fleetOfHostname = {
  name: "fleet",
  in: "query" as const,
  required: false,
  description: "The fleet in which to look the hostname up (409 ambiguous_server lists the candidates without it)",
  schema: { type: "string" as const, pattern: "^[a-z0-9][a-z0-9-]{0,62}$" },
};

/** GET /v1/servers/{id}?wait=S: documented by hand, validated by the handler (see the route). */
export const serverWaitQuery = z.object({ wait: decimalParam(0, MAX_WAIT_S).default(0) });

/** PATCH /v1/servers/{id}: its reboot identity (FleetLock id, reboot group), its roles and/or its labels. */
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
    labels: labelsPatchSchema.optional(),
  })
  .refine(
    (p) =>
      p.fleetlock_id !== undefined || p.reboot_group !== undefined || p.roles !== undefined || p.labels !== undefined,
    {
      message: "send fleetlock_id, reboot_group, roles and/or labels",
    },
  )
  .openapi("ServerPatch");
export type ServerPatch = z.infer<typeof ServerPatch>;

export const DecommissionInput = z
  .strictObject({
    force: z
      .boolean()
      .default(false)
      .openapi({ description: "remove a dead host without its acknowledgement (admin only)" }),
    reason: z
      .string()
      .trim()
      .min(1)
      .max(MAX_REASON_LENGTH)
      .optional()
      .openapi({ description: "required with force; audited" }),
  })
  .refine((b) => !b.force || b.reason !== undefined, { message: "force needs a reason", path: ["reason"] })
  .openapi("DecommissionInput");
export type DecommissionInput = z.infer<typeof DecommissionInput>;
