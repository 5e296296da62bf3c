import { z } from "@hono/zod-openapi";
import { MAX_REASON_LENGTH } from "../domain/limits";
import { GATE_NAMES } from "./gates";

const MAX_OUTBOUND_URL_LENGTH = 2048;

/** An http(s) URL; whether it may be called (https, or loopback http in local runs) is the service's check. */
const outboundUrl = z
  .string()
  .max(MAX_OUTBOUND_URL_LENGTH)
  // A pattern JSON Schema validators read the same (no escaped slashes, no flags).
  .regex(new RegExp("^https?://"), "must start with https://")
  .openapi({ format: "uri", example: "https://alerts.example.com/ok-to-reboot" });

const ExternalCheckSchema = z
  .strictObject({
    url: outboundUrl,
    timeout_s: z.number().int().min(1).max(30).default(5).openapi({ description: "How long the check may take" }),
    cache_s: z
      .number()
      .int()
      .min(5)
      .max(3600)
      .default(60)
      .openapi({ description: "How long an answer counts before it is asked again" }),
    fail_open: z.boolean().default(false).openapi({
      description:
        "When the URL cannot be reached (timeout, network error): true lets grants through; false (default) holds them",
    }),
  })
  .openapi("ExternalGateCheck");

export const GateConfigSchema = z
  .strictObject({
    fleet_health: z
      .strictObject({
        max_unhealthy: z
          .number()
          .int()
          .min(0)
          .nullable()
          .optional()
          .openapi({ description: "Hold while more failed + stale servers than this" }),
        max_unhealthy_percent: z
          .number()
          .min(0)
          .max(100)
          .nullable()
          .optional()
          .openapi({ description: "Hold while more than this share of the fleet's servers is failed or stale" }),
      })
      .refine(
        (h) => h.max_unhealthy != null || h.max_unhealthy_percent != null,
        "set max_unhealthy, max_unhealthy_percent or both",
      )
      .nullable()
      .optional(),
    rollouts: z.boolean().optional().openapi({ description: "Hold while a rollout runs (or rolls back) in the fleet" }),
    max_rebooted_unhealthy: z.number().int().min(0).nullable().optional().openapi({
      description:
        "Hold while more servers than this rebooted and have not yet reported healthy (a report from the new boot, every agent realized)",
    }),
    external: ExternalCheckSchema.nullable().optional(),
  })
  .openapi("RebootGates", {
    description: "Conditions every new grant needs (they never revoke one). {} means no gates.",
    example: { fleet_health: { max_unhealthy_percent: 5 }, rollouts: true, max_rebooted_unhealthy: 1 },
  });

export const HoldInput = z
  .strictObject({
    reason: z.string().trim().min(1).max(MAX_REASON_LENGTH),
    until: z.iso
      .datetime({ offset: true })
      .optional()
      .openapi({ description: "When the hold lifts by itself (ISO 8601)" }),
    for_s: z
      .number()
      .int()
      .min(1)
      .max(90 * 86400)
      .optional()
      .openapi({ description: "Or: how long from now the hold lasts" }),
  })
  .refine((h) => !(h.until && h.for_s), "give until or for_s, not both")
  .openapi("RebootHoldInput");

export const HoldSchema = z
  .object({ reason: z.string(), until: z.string().nullable(), by: z.string(), at: z.string() })
  .openapi("RebootHold");

export const VerdictSchema = z
  .object({
    gate: z.enum(GATE_NAMES),
    open: z.boolean(),
    kind: z.string().openapi({ description: "The FleetLock kind a host is refused with while this gate is closed" }),
    reason: z.string(),
  })
  .openapi("RebootGateState");

export const FleetGatesSchema = z
  .object({
    fleet: z.string(),
    default: GateConfigSchema.nullable().openapi({ description: "The gates of groups that have none of their own" }),
    hold: HoldSchema.nullable(),
    inputs: z.object({
      health: z
        .object({
          failed: z.number().int(),
          stale: z.number().int(),
          total: z.number().int(),
          age_s: z.number().int().nullable(),
        })
        .nullable(),
      rollouts: z.object({ running: z.number().int(), age_s: z.number().int().nullable() }).nullable(),
      external: z.array(
        z.object({
          url: z.string(),
          ok: z.boolean(),
          reachable: z.boolean(),
          detail: z.string(),
          age_s: z.number().int().nullable(),
        }),
      ),
      rebooted_unhealthy: z.number().int(),
    }),
    groups: z.array(
      z.object({
        name: z.string(),
        source: z.enum(["group", "fleet", "none"]),
        open: z.boolean(),
        gates: z.array(VerdictSchema),
      }),
    ),
  })
  .openapi("FleetGates");
