import { z } from "@hono/zod-openapi";
import { ROLLOUT_STATES, ROLLOUT_TARGET_STATES, SERVER_STATES, SERVER_STATUSES } from "../domain/enums";
import { serverStatus } from "../model/server/schemas";
import { Fleet } from "../fleets/schemas";

const countsOf = <T extends readonly string[]>(keys: T) =>
  z.object(Object.fromEntries(keys.map((k) => [k, z.number().int()])) as Record<T[number], z.ZodNumber>);

const SummaryGroup = z
  .object({
    name: z.string(),
    slots: z.number().int(),
    available_slots: z.number().int(),
    holders: z.number().int(),
    stuck: z.number().int().openapi({ description: "Holders past the fleet's lock_ttl_s" }),
    queue_length: z.number().int(),
    paused: z.boolean(),
    open_now: z
      .boolean()
      .openapi({ description: "Admitting now: not paused, and inside a maintenance window (or the group has none)" }),
    has_windows: z.boolean(),
  })
  .openapi("FleetSummaryRebootGroup");

const SummaryRollout = z
  .object({
    id: z.string(),
    agent: z.string(),
    image: z.string(),
    version: z.string(),
    state: z.enum(ROLLOUT_STATES),
    pass: z.number().int(),
    counts: countsOf(ROLLOUT_TARGET_STATES),
    total: z.number().int(),
    created_by: z.string(),
    created_at: z.string(),
    updated_at: z.string(),
  })
  .openapi("FleetSummaryRollout");

export const FleetSummary = z
  .object({
    fleet: z.string(),
    at: z.string().openapi({ description: "When the summary was read" }),
    servers: z
      .object({
        total: z.number().int().openapi({ description: "Every server but removed ones (tombstones)" }),
        by_status: countsOf(SERVER_STATUSES).openapi({ description: "Removed servers excluded" }),
        by_state: countsOf(SERVER_STATES),
      })
      .openapi({
        description: "Counted from the fleet-wide index (D1), which a report reaches shortly after its acknowledgement",
      }),
    reboot_groups: z.array(SummaryGroup),
    rollouts: z.array(SummaryRollout).openapi({
      description: "Rollouts that still move (running, paused, rolling back), newest first, with their target counters",
    }),
    data: z.object({
      version: z.number().int(),
      newest_version: z.number().int(),
      pending: z.array(z.object({ version: z.number().int(), description: z.string() })),
    }),
  })
  .openapi("FleetSummary");
export type FleetSummary = z.infer<typeof FleetSummary>;

/** GET /v1/status (./service.ts). */
export const StatusSchema = z
  .object({
    data: z.object({
      state: z.enum(["current", "running", "failing", "pending"]),
      data_version: z.number().int(),
      newest_version: z.number().int(),
    }),
    fleets: z.array(
      z.object({
        id: z.string(),
        servers: z.object({
          total: z.number().int(),
          by_status: z.record(z.string(), z.number().int()),
          by_state: z.record(z.string(), z.number().int()),
        }),
        attention: z.array(
          z.object({
            status: serverStatus,
            count: z.number().int().openapi({
              description: "every server of the fleet with this status; `items` shows the first by hostname",
            }),
            items: z.array(
              z.object({
                id: z.string(),
                hostname: z.string(),
                status: serverStatus,
                last_seen: z.string().nullable(),
              }),
            ),
          }),
        ),
        reboot_groups: z.array(
          z.object({
            name: z.string(),
            slots: z.number().int(),
            held: z.number().int(),
            paused: z.boolean(),
            open_now: z.boolean(),
            queued: z.number().int(),
            holders: z.array(
              z.object({ id: z.string(), hostname: z.string().nullable(), since: z.string(), stuck: z.boolean() }),
            ),
          }),
        ),
        rollouts: z.array(
          z.object({
            id: z.string(),
            agent: z.string(),
            image: z.string(),
            state: z.string(),
            pass: z.number().int(),
            counts: z.record(z.string(), z.number()),
            created_at: z.string(),
          }),
        ),
      }),
    ),
    more_fleets: z.boolean().openapi({ description: "without ?fleet=, whether fleets beyond the first 50 exist" }),
  })
  .openapi("Status");

/** GET /v1/status/fleets: a page of fleets, each with its settings and its health (./service.ts). */
export const FleetHealth = Fleet.extend({
  servers: z.object({
    total: z.number().int().openapi({ description: "Every server but removed ones" }),
    by_status: z.record(z.string(), z.number().int()).openapi({ description: "Only statuses some server has" }),
  }),
  needs_look: z.number().int().openapi({ description: "Servers failed, stale or drifted" }),
  stuck_reboots: z.number().int().openapi({ description: "Reboot slots held past the fleet's lock_ttl_s" }),
  rollouts_running: z
    .number()
    .int()
    .openapi({ description: "Rollouts that still move (running, paused, rolling back)" }),
  health: z.enum(["empty", "ok", "needs_look"]).openapi({
    description: "empty: no servers; needs_look: a server failed, stale or drifted, or a reboot slot stuck; else ok",
  }),
}).openapi("FleetHealth");
