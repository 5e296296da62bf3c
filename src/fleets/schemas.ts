import { z } from "@hono/zod-openapi";
import { IMAGE_POLICIES } from "../domain/images";
import { MAX_CAPABILITIES, MAX_FLEETLOCK_ID_LENGTH, MAX_GROUP_NAME_LENGTH, MAX_GROUP_SLOTS } from "../domain/limits";
import { labelKey } from "../model/server/labels";
import { printable } from "../model/server/schemas";
import { userKeyed } from "../lib/user-keys";
import { fleetId } from "../model/fleet";

const GROUP_NAME = /^[a-zA-Z0-9.-]+$/;

/** The `{fleet}` of every /v1/fleets/{fleet}/… path; a route's other parameters extend it. */
export const fleetParam = z.object({ fleet: fleetId });
export const CAPABILITY_NAME = /^[a-z][a-z0-9_]{0,62}$/;
export const capabilityName = z
  .string()
  .regex(CAPABILITY_NAME, "capability names are 1-63 chars of a-z, 0-9 and '_', starting with a letter");
export const groupName = z.string().max(MAX_GROUP_NAME_LENGTH).regex(GROUP_NAME, "group names match ^[a-zA-Z0-9.-]+$");

/** A count of servers (at least 1) or a share of them, "1%" to "100%". */
const amount = z
  .union([
    z.number().int().min(1).max(100_000),
    z
      .string()
      .regex(/^([1-9][0-9]?|100)%$/, 'a share is "1%" to "100%"')
      .transform((s) => s as `${number}%`),
  ])
  .openapi({ description: 'A count of servers, or a share of them ("25%", rounded up)', example: 1 });

const MAX_BUDGET_LABELS = 4;

/** The fleet's disruption budget (docs/reboot-safety.md#one-disruption-budget). */
const DisruptionBudgetSchema = z
  .strictObject({
    max_unavailable: amount.nullable().default(null).openapi({
      description: "At most this many servers of the fleet disrupted at once; null: no fleet-wide limit",
    }),
    per_label: userKeyed(
      z
        .record(labelKey, amount)
        .refine((m) => Object.keys(m).length <= MAX_BUDGET_LABELS, `at most ${MAX_BUDGET_LABELS} label keys`),
    )
      .default({})
      .openapi({
        description: 'Per label key, at most this many servers sharing one value of it ({"zone": 1})',
        example: { zone: 1 },
      }),
  })
  .refine((b) => b.max_unavailable !== null || Object.keys(b.per_label).length > 0, {
    message: "name max_unavailable or per_label (null clears the budget)",
  })
  .openapi("DisruptionBudget", {
    description:
      "How many servers may be disrupted at once (holding a reboot slot, an applying rollout target, stale or failed)",
  });

/** The fleet's settings, shared by creation (with defaults) and PATCH (each optional). */
const setting = {
  stale_after_s: z
    .number()
    .int()
    .min(10)
    .max(7 * 86400),
  lock_ttl_s: z
    .number()
    .int()
    .min(60)
    .max(30 * 86400),
  allow_unknown_ids: z.boolean(),
  default_group_slots: z.number().int().min(1).max(MAX_GROUP_SLOTS).nullable(),
  disruption_budget: DisruptionBudgetSchema.nullable(),
  image_policy: z.enum(IMAGE_POLICIES).openapi({
    description:
      '"catalog": channels, rollouts and desired configs name only catalog images (else 422 image_not_found); "any": free-form image strings',
  }),
};
const atMostCapabilities = (c: Record<string, unknown>) => Object.keys(c).length <= MAX_CAPABILITIES;

export const FleetInput = z
  .strictObject({
    id: fleetId,
    capabilities: userKeyed(
      z.record(capabilityName, z.boolean()).refine(atMostCapabilities, `at most ${MAX_CAPABILITIES} capabilities`),
    ).default({}),
    stale_after_s: setting.stale_after_s.default(300),
    lock_ttl_s: setting.lock_ttl_s.default(3600),
    allow_unknown_ids: setting.allow_unknown_ids.default(false),
    default_group_slots: setting.default_group_slots.default(null),
    disruption_budget: setting.disruption_budget.default(null),
    image_policy: setting.image_policy.default("any"),
  })
  .openapi("FleetInput");
export type FleetInput = z.infer<typeof FleetInput>;

/**
 * PATCH /v1/fleets/{fleet}: capabilities are merged into the fleet's (a key set to null is removed,
 * as in a JSON merge patch); each setting given replaces the fleet's.
 */
export const FleetPatch = z
  .strictObject({
    capabilities: userKeyed(
      z
        .record(capabilityName, z.boolean().nullable())
        .refine(atMostCapabilities, `at most ${MAX_CAPABILITIES} capabilities`),
    ).optional(),
    stale_after_s: setting.stale_after_s.optional(),
    lock_ttl_s: setting.lock_ttl_s.optional(),
    allow_unknown_ids: setting.allow_unknown_ids.optional(),
    default_group_slots: setting.default_group_slots.optional(),
    disruption_budget: setting.disruption_budget.optional(),
    image_policy: setting.image_policy.optional(),
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
    disruption_budget: DisruptionBudgetSchema.nullable(),
    image_policy: z.enum(IMAGE_POLICIES),
    created_at: z.string(),
  })
  .openapi("Fleet");

/**
 * The id a server's FleetLock client sends (Zincati: its node id); unique per fleet. Printed by
 * `hm` and the console, so no control characters (a terminal would run an escape).
 */
export const fleetlockId = z
  .string()
  .min(1)
  .max(MAX_FLEETLOCK_ID_LENGTH)
  .regex(...printable("a FleetLock id"));
export const roleName = z.string().regex(/^[a-z0-9][a-z0-9._-]{0,62}$/);
