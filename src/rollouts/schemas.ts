import { z } from "@hono/zod-openapi";
import { labelsSchema } from "../model/server/labels";
import { BlockedByListSchema } from "../model/blocked-by";
import { StrategyInput } from "../model/strategy";
import { fleetId } from "../model/fleet";
import { agentName, imageRef, versionString } from "../model/server/schemas";
import { ROLLOUT_STATES, ROLLOUT_TARGET_STATES as TARGET_STATES } from "../domain/enums";
import { STRATEGY_SOURCES } from "./machine";
import {
  DEFAULT_ROLLOUT_CONCURRENCY,
  DEFAULT_SERVER_TIMEOUT_S,
  MAX_ROLLOUT_CONCURRENCY,
  MAX_ROLLOUT_SERVER_LIST,
  MAX_REASON_LENGTH,
  MAX_ROLLOUT_WAIT_S,
  MAX_SERVER_TIMEOUT_S,
  MAX_SLOW_FACTOR,
} from "../domain/limits";

export { MAX_ROLLOUT_WAIT_S };

const roleName = z.string().regex(/^[a-z0-9][a-z0-9._-]{0,62}$/);

const AbortInput = z
  .strictObject({
    max_failures: z.number().int().min(0).max(1_000_000).optional(),
    max_failure_percent: z.number().min(0).max(100).optional(),
    min_completed: z.number().int().min(1).max(1_000_000).optional(),
  })
  .refine((a) => !(a.max_failures !== undefined && a.max_failure_percent !== undefined), {
    message: "give max_failures or max_failure_percent, not both",
  })
  .refine((a) => a.min_completed === undefined || a.max_failure_percent !== undefined, {
    message: "min_completed applies to max_failure_percent only",
  });

export const RolloutInput = z
  .strictObject({
    fleet: fleetId,
    agent: agentName,
    image: imageRef.optional().openapi({ description: "The image by name (with version); or give image_id" }),
    version: versionString.optional(),
    image_id: z.uuid().optional().openapi({ description: "A catalog image, by id (instead of image and version)" }),
    selector: z
      .strictObject({
        roles: z.array(roleName).max(64).optional(),
        labels: labelsSchema.optional().openapi({
          description:
            "servers with every one of these labels (key and value); with roles or servers too, a target matches each",
        }),
        servers: z
          .array(z.string().min(1).max(253))
          .max(MAX_ROLLOUT_SERVER_LIST)
          .optional()
          .openapi({ description: "server ids or hostnames" }),
      })
      .optional(),
    /** Server ids or hostnames; matching targets are listed as skipped (excluded). */
    exclude: z.array(z.string().min(1).max(253)).max(MAX_ROLLOUT_SERVER_LIST).default([]),
    concurrency: z.number().int().min(1).max(MAX_ROLLOUT_CONCURRENCY).default(DEFAULT_ROLLOUT_CONCURRENCY),
    server_timeout_s: z
      .number()
      .int()
      .min(1)
      .max(MAX_SERVER_TIMEOUT_S)
      .default(DEFAULT_SERVER_TIMEOUT_S)
      .openapi({ description: "a target with no realizing report by then is timed_out" }),
    slow_factor: z.number().min(1).max(MAX_SLOW_FACTOR).optional(),
    abort: AbortInput.optional(),
    update_channel: z.boolean().default(true),
    reboot_slot: z.boolean().default(false),
    // A union, not .nullable(): the document then says "the strategy or null" (anyOf), where a
    // nullable reference is written as allOf [the strategy, …], which null never matches.
    strategy: z
      .union([StrategyInput, z.null()])
      .optional()
      .openapi({
        description:
          "Canary, pause, analysis and wave steps, in order. Without it: the fleet's default for the agent (a fleet " +
          "spec's channels.<agent>.rollout), else one wave at `concurrency`; null: one wave, whatever the default. " +
          "`concurrency` still bounds the targets applying at once within a step.",
      }),
    channel_only: z
      .boolean()
      .default(false)
      .openapi({
        description:
          "Move only the fleet's channel for the agent (servers set up later get the image) and write no server. " +
          "Without it, a rollout that would target no server is refused (422 no_targets).",
      }),
  })
  .refine(
    (r) =>
      r.image_id ? r.image === undefined && r.version === undefined : r.image !== undefined && r.version !== undefined,
    {
      message: "name the image by image and version, or by image_id (not both)",
      path: ["image"],
    },
  )
  .refine((r) => !r.channel_only || r.update_channel, {
    message: "channel_only moves the channel: update_channel cannot be false",
    path: ["update_channel"],
  })
  .refine((r) => !r.channel_only || (!r.selector && r.exclude.length === 0), {
    message: "channel_only writes no server: selector and exclude do not apply",
    path: ["channel_only"],
  })
  .refine((r) => !r.channel_only || !r.strategy, {
    message: "channel_only writes no server: a strategy does not apply",
    path: ["strategy"],
  })
  .openapi("RolloutInput");
export type RolloutInput = z.infer<typeof RolloutInput>;

const counts = z.object(
  Object.fromEntries(TARGET_STATES.map((s) => [s, z.number().int()])) as Record<
    (typeof TARGET_STATES)[number],
    z.ZodNumber
  >,
);

export const RolloutSchema = z
  .object({
    id: z.string(),
    fleet: z.string(),
    agent: z.string(),
    image: z.string(),
    version: z.string(),
    state: z.enum(ROLLOUT_STATES),
    pass: z.number().int().openapi({ description: "0: the forward pass; 1: the rollback pass" }),
    reason: z.string().nullable(),
    concurrency: z.number().int(),
    server_timeout_s: z.number().int().nullable(),
    slow_factor: z.number().nullable(),
    abort: z.object({
      max_failures: z.number().optional(),
      max_failure_percent: z.number().optional(),
      min_completed: z.number().optional(),
    }),
    update_channel: z.boolean(),
    channel_updated: z.boolean().nullable().openapi({
      description:
        "Whether the rollout moved the fleet's channel for the agent to its image: true once moved, false when `update_channel` is false, null while the move is queued and not confirmed yet (the start answers before its outbox delivers it; read the rollout again)",
    }),
    reboot_slot: z.boolean(),
    counts,
    total: z.number().int(),
    median_s: z.number().nullable(),
    eta_s: z.number().nullable(),
    warnings: z.array(z.object({ server_id: z.string(), hostname: z.string(), at: z.string(), message: z.string() })),
    created_by: z.string(),
    created_by_name: z
      .string()
      .nullable()
      .openapi({ description: "The name of the token that started it (null: not a token, or one since deleted)" }),
    created_at: z.string(),
    ended_at: z.string().nullable(),
    change: z.number().int().openapi({ description: "Moves with every change; pass it back as `since` to long-poll" }),
    strategy: z.union([StrategyInput, z.null()]).openapi({ description: "The strategy it follows (null: one wave)" }),
    strategy_source: z.enum(STRATEGY_SOURCES).openapi({
      description:
        "Whose strategy: the request's, the fleet's default for the agent (`fleet_default`: its spec's channels.<agent>.rollout), or none (one wave)",
    }),
    steps: z
      .array(
        z.object({
          phase: z.number().int(),
          step: z
            .number()
            .int()
            .openapi({ description: "index in strategy.steps (its length: the implicit last wave)" }),
          kind: z.enum(["release", "pause", "analysis"]),
          title: z.string(),
          state: z.enum(["pending", "running", "done", "failed", "skipped"]),
          label: z.object({ key: z.string(), value: z.string() }).nullable(),
          size: z.number().int(),
          counts: z.record(z.string(), z.number()),
          servers: z.array(z.string()).openapi({ description: "hostnames, the first 50" }),
          started_at: z.string().nullable(),
          until: z.string().nullable(),
        }),
      )
      .openapi({ description: "The plan: one entry per phase (a wave by a label is one per value)" }),
    current_phase: z.number().int().nullable(),
    analysis: z
      .array(
        z.object({
          phase: z.number().int(),
          seq: z.number().int(),
          check: z.number().int(),
          name: z.string(),
          at: z.string(),
          ok: z.boolean(),
          value: z.number().nullable(),
          threshold: z.number().nullable(),
          detail: z.string(),
        }),
      )
      .openapi({ description: "Analysis samples, oldest first (the latest 500)" }),
    blocked_by: BlockedByListSchema,
  })
  .openapi("Rollout");

export const RolloutListItem = z
  .object({
    id: z.string(),
    fleet: z.string(),
    agent: z.string(),
    image: z.string(),
    version: z.string(),
    state: z.enum(ROLLOUT_STATES),
    pass: z.number().int(),
    counts: z.record(z.string(), z.number()),
    reason: z.string().nullable(),
    created_by: z.string(),
    created_by_name: z
      .string()
      .nullable()
      .openapi({ description: "The name of the token that started it (null: not a token, or one since deleted)" }),
    created_at: z.string(),
    updated_at: z.string(),
    ended_at: z.string().nullable(),
  })
  .openapi("RolloutListItem");

export const TargetSchema = z
  .object({
    server_id: z.string(),
    hostname: z.string(),
    reboot_group: z.string(),
    pass: z.number().int(),
    state: z.enum(TARGET_STATES),
    image: z.string(),
    version: z.string(),
    from_image: z.string().nullable(),
    from_version: z.string().nullable(),
    generation: z.number().int().nullable(),
    reboot_slot: z.enum(["none", "requested", "held"]),
    started_at: z.string().nullable(),
    ended_at: z.string().nullable(),
    duration_s: z.number().nullable(),
    reason: z.string().nullable(),
    slow: z.boolean(),
    via_channel: z.boolean().openapi({
      description:
        "A rollback target that was no target of the forward pass: its server took the rollout's image from the fleet's channel while the rollout held it, and goes back to the image the channel held before",
    }),
    blocked_by: BlockedByListSchema.openapi({
      description: "Why a queued or waiting target has not started (empty when it does not wait)",
    }),
  })
  .openapi("RolloutTarget");

export const EventSchema = z
  .object({
    id: z.number().int(),
    at: z.string(),
    kind: z.string(),
    server_id: z.string().nullable(),
    hostname: z.string().nullable(),
    details: z.unknown(),
  })
  .openapi("RolloutEvent");

export const EndTargetInput = z
  .strictObject({
    reason: z
      .string()
      .trim()
      .min(1)
      .max(MAX_REASON_LENGTH)
      .optional()
      .openapi({ description: "why (audited, and in the target's reason)" }),
  })
  .openapi("EndTargetInput");
export type EndTargetInput = z.infer<typeof EndTargetInput>;
