import { z } from "@hono/zod-openapi";
import { BlockedByListSchema } from "../model/blocked-by";
import { fleetlockId, groupName } from "../fleets/schemas";
import { MAX_GROUP_SLOTS, MAX_UNCLAIMED_GRANT_S, MIN_UNCLAIMED_GRANT_S } from "../domain/limits";
import { FLEETLOCK_KINDS } from "../domain/enums";
import { MAX_QUEUE_WAIT_S, UNCLAIMED_GRANT_S } from "./queue";
import { GateConfigSchema, HoldSchema, VerdictSchema } from "./gate-schemas";
import { RELEASE_RULES } from "./health";
import { DEFAULT_HEALTH_TIMEOUT_S } from "./semaphore";
import { MaintenanceWindowSchema } from "../model/windows";

export const ClientParamsBody = z
  .object({
    client_params: z.object({
      id: fleetlockId.openapi({ description: "The client's id (Zincati: its node id); a server's fleetlock_id" }),
      group: groupName.default("default"),
    }),
  })
  .openapi("FleetLockRequest", {
    example: { client_params: { id: "c988d2509fdf4cdcbed39037c56406fb", group: "default" } },
  });

export const FleetLockErrorBody = z
  .object({ kind: z.enum(FLEETLOCK_KINDS), value: z.string().min(1) })
  .openapi("FleetLockError");

export const GroupInput = z
  .strictObject({
    slots: z
      .number()
      .int()
      .min(0)
      .max(MAX_GROUP_SLOTS)
      .openapi({ description: "0 admits no one; existing holders keep their slots" }),
    paused: z.boolean().optional().openapi({ description: "Omitted: unchanged (false for a new group)" }),
    windows: z.array(MaintenanceWindowSchema).max(64).optional().openapi({
      description: "Weekly windows in which alone new slots are granted; [] removes them. Omitted: unchanged",
    }),
    queue_wait_s: z
      .number()
      .int()
      .min(0)
      .max(MAX_QUEUE_WAIT_S)
      .optional()
      .openapi({
        description:
          "How long a pre-reboot that finds the group full or outside its windows waits for a slot, first come first " +
          "served, before it is refused; 0 refuses at once. Omitted: unchanged (0 for a new group)",
      }),
    unclaimed_grant_s: z
      .number()
      .int()
      .min(MIN_UNCLAIMED_GRANT_S)
      .max(MAX_UNCLAIMED_GRANT_S)
      .optional()
      .openapi({
        description:
          "How long a slot granted to a parked host that could not be told (its request went away) is kept for its next " +
          `pre-reboot before it goes to the next host. Omitted: unchanged (${UNCLAIMED_GRANT_S} for a new group)`,
      }),
    release_on: z
      .enum(RELEASE_RULES)
      .optional()
      .openapi({
        description:
          "What frees a slot: `steady_state` (the host's steady-state call, as every FleetLock server does) or `healthy_report` " +
          "(the steady-state call is answered 200, but the slot is freed only when the server reports from its new boot with every " +
          "agent realized). Omitted: unchanged (steady_state for a new group)",
      }),
    health_timeout_s: z
      .number()
      .int()
      .min(30)
      .max(7 * 86400)
      .optional()
      .openapi({
        description: `healthy_report: how long after its reboot a server may take to report healthy before it is marked unhealthy after reboot. Omitted: unchanged (${DEFAULT_HEALTH_TIMEOUT_S} for a new group)`,
      }),
    pause_on_unhealthy: z.boolean().optional().openapi({
      description:
        "healthy_report: whether the group pauses itself when a server is unhealthy after its reboot. Omitted: unchanged (true for a new group)",
    }),
    gates: GateConfigSchema.nullable().optional().openapi({
      description:
        "The group's own health gates ({} for none); null: the fleet's default gates (PUT /v1/fleets/{fleet}/gates). Omitted: unchanged",
    }),
  })
  .openapi("RebootGroupInput");

const HolderSchema = z
  .object({
    id: z.string(),
    granted_at: z.string(),
    held_for_s: z.number().int(),
    stuck: z.boolean().openapi({ description: "Held for longer than the fleet's lock_ttl_s" }),
    server: z.object({ id: z.string(), hostname: z.string().nullable() }).nullable(),
    rebooted_at: z.string().nullable().openapi({
      description: "healthy_report: when the host was back from its reboot; the slot waits for a healthy report",
    }),
    unhealthy_after_reboot: z
      .boolean()
      .openapi({ description: "healthy_report: it missed the group's health_timeout_s; the slot stays taken" }),
    unclaimed_until: z
      .string()
      .nullable()
      .openapi({
        description:
          "Granted to a parked host that could no longer be answered (or, where the runtime cannot tell, whose answer may " +
          "not have reached it): its next call claims the slot, else it is released then (the group's unclaimed_grant_s after the grant)",
      }),
  })
  .openapi("RebootHolder");

const QueuedSchema = z
  .object({
    position: z.number().int().openapi({ description: "1 is granted the next free slot" }),
    id: z.string(),
    server: z.object({ id: z.string(), hostname: z.string().nullable() }).nullable(),
    waiting_since: z.string(),
    waited_s: z.number().int(),
    deadline: z.string().openapi({ description: "When its wait runs out and it is refused" }),
    connected: z
      .boolean()
      .openapi({ description: "false: its request went away; it keeps its place until its deadline" }),
    blocked_by: BlockedByListSchema.openapi({ description: "Why it waits, first the reason to clear first" }),
  })
  .openapi("RebootQueued");

export const GroupSchema = z
  .object({
    name: z.string(),
    slots: z.number().int(),
    paused: z.boolean(),
    windows: z.array(
      z.object({
        days: z.array(z.string()),
        start_time: z.string(),
        length_minutes: z.number().int(),
        time_zone: z.string(),
      }),
    ),
    open_now: z.boolean(),
    available_slots: z.number().int(),
    queue_wait_s: z.number().int(),
    unclaimed_grant_s: z.number().int(),
    holders: z.array(HolderSchema),
    queue: z.array(QueuedSchema),
    release_on: z.enum(RELEASE_RULES),
    health_timeout_s: z.number().int(),
    pause_on_unhealthy: z.boolean(),
    paused_reason: z.string().nullable().openapi({
      description: "Why the coordinator paused the group by itself (null: an operator paused it, or it is not paused)",
    }),
    gates: z.array(VerdictSchema).openapi({
      description: "The gates that apply to the group and what each says now; a closed one holds every new grant",
    }),
    gates_source: z
      .enum(["group", "fleet", "none"])
      .openapi({ description: "Whose gates apply: the group's own, the fleet's default, or none" }),
    own_gates: GateConfigSchema.nullable(),
    hold: HoldSchema.nullable().openapi({
      description: "An operator's hold on this group (a fleet-wide hold shows in gates)",
    }),
    blocked_by: BlockedByListSchema.openapi({
      description: "What holds the whole group now (pause, holds, a closed gate or window); empty when it would grant",
    }),
    updated_at: z.string(),
  })
  .openapi("RebootGroup");

export const FleetlockKeyCreated = z
  .object({
    fleet: z.string(),
    key: z.string().openapi({ description: "Shown only here; stored hashed" }),
    base_url: z.string().openapi({ example: "https://harbormaster.example.com/fleetlock/prod/KEY/" }),
  })
  .openapi("FleetlockKey");

export const FixHoldSchema = z
  .object({
    server: z.object({ id: z.string(), hostname: z.string().nullable() }),
    state: z.enum(["writing", "written", "counted_failed"]).openapi({
      description:
        "`writing`: a fix call may still write to the server (until settles_at, when its ledger is asked); " +
        "`written`: the write is known and the unit waits for the server's realized report (until settles_at, when a " +
        "server still not realized is counted failed); `counted_failed`: that bound passed, and the server counts as " +
        "failed until its ledger reports it healthy",
    }),
    since: z.string().openapi({ description: "When the fix took the unit (or its bound counted the server failed)" }),
    settles_at: z.string().nullable().openapi({ description: "When the coordinator looks at it again by itself" }),
    seen_generation: z.number().int().nullable().openapi({ description: "The desired generation the first fix saw" }),
    written_generation: z
      .number()
      .int()
      .nullable()
      .openapi({ description: "The newest generation known written under the hold" }),
  })
  .openapi("FixHold");

export const FixHoldList = z.object({ fleet: z.string(), items: z.array(FixHoldSchema) }).openapi("FixHoldList");
