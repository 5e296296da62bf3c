/**
 * The fleet spec (docs/fleets-as-code.md): one document per fleet holding everything an operator declares
 * about it, built from the same zod schemas as the API it stands for (fleet settings, channels,
 * roles, reboot groups), and the answers of the spec routes. schemas/fleet-spec.schema.json is
 * generated from `FleetSpec` (scripts/fleet-spec-schema.ts).
 *
 * Sections: each is optional; a map section left out is an empty one (its items are unlisted,
 * or pruned), a setting left out is not managed by the spec. A new section is a field here, a
 * reader in ./store.ts and a differ in ./diff.ts (as webhooks are).
 */
import { z } from "@hono/zod-openapi";
import {
  MAX_CAPABILITIES,
  MAX_SPEC_CHANNELS,
  MAX_SPEC_GROUPS,
  MAX_SPEC_ROLES,
  MAX_SPEC_SERVERS,
} from "../domain/limits";
import { capabilityName, FleetPatch, groupName, roleName } from "../fleets/schemas";
import { fleetId } from "../model/fleet";
import { PlannerRunSchema, RoleInput } from "../intent/schemas";
import { agentName, imageRef, versionString } from "../model/server/schemas";
import { MAX_WEBHOOKS_PER_FLEET } from "../webhooks/manage";
import { SpecSecretsSchema, SpecWebhookSchema } from "../webhooks/schemas";
import { MAX_SPEC_ACCESS, SpecAccessKey, SpecAccessScope } from "../sso/schemas";
import { SpecRebootGroup } from "./groups";
import { SpecChannelRollout } from "./rollout-defaults";
import { SpecServer, specHostname } from "./spec-servers";
import { userKeyed } from "../lib/user-keys";

/** A webhook's name in a spec; one added through the API is named by its id (a UUID fits). */
const webhookName = z.string().regex(/^[a-z0-9][a-z0-9._-]{0,62}$/, "webhook names match ^[a-z0-9][a-z0-9._-]{0,62}$");

export const SPEC_API_VERSION = "harbormaster/v1" as const;
export const SPEC_KIND = "FleetSpec" as const;

/** A map section: items by name, at most `max` of them; left out, it is empty. */
const section = <K extends z.ZodString, V extends z.ZodType>(
  key: K,
  value: V,
  max: number,
  what: string,
  description: string,
) =>
  userKeyed(z.record(key, value).refine((m) => Object.keys(m).length <= max, `at most ${max} ${what}`))
    .optional()
    .openapi({ description });

/**
 * A channel in a spec: the image by name and version (in a fleet with image_policy "catalog", a
 * catalog image's), and how the agent's rollouts go by default (./rollout-defaults.ts).
 */
const SpecChannel = z
  .strictObject({ image: imageRef, version: versionString, rollout: SpecChannelRollout.optional() })
  .openapi("SpecChannel");

/** The fleet's settings, each as PATCH /v1/fleets/{fleet} takes it; one left out is not managed. */
export const SpecSettings = z
  .strictObject({
    stale_after_s: FleetPatch.shape.stale_after_s,
    lock_ttl_s: FleetPatch.shape.lock_ttl_s,
    allow_unknown_ids: FleetPatch.shape.allow_unknown_ids,
    default_group_slots: FleetPatch.shape.default_group_slots,
    disruption_budget: FleetPatch.shape.disruption_budget,
    image_policy: FleetPatch.shape.image_policy,
  })
  .openapi("FleetSpecSettings");
export type SpecSettings = z.infer<typeof SpecSettings>;

export const FleetSpec = z
  .strictObject({
    apiVersion: z.literal(SPEC_API_VERSION),
    kind: z.literal(SPEC_KIND),
    fleet: fleetId,
    settings: SpecSettings.optional(),
    capabilities: section(
      capabilityName,
      z.boolean(),
      MAX_CAPABILITIES,
      "capabilities",
      "Named booleans that role agents' `when` conditions read",
    ),
    channels: section(
      agentName,
      SpecChannel,
      MAX_SPEC_CHANNELS,
      "channels",
      "Per agent, the image and version the fleet wants, and how its rollouts go by default",
    ),
    roles: section(
      roleName,
      RoleInput,
      MAX_SPEC_ROLES,
      "roles",
      "Per role, its agents; each agent needs a channel (in the spec, or the fleet's unless pruning)",
    ),
    reboot_groups: section(
      groupName,
      SpecRebootGroup,
      MAX_SPEC_GROUPS,
      "reboot groups",
      "Per reboot group, its settings (pause and holders are operators' and hosts', not the spec's)",
    ),
    webhooks: section(
      webhookName,
      SpecWebhookSchema,
      MAX_WEBHOOKS_PER_FLEET,
      "webhooks",
      "Per webhook name, its HTTPS URL, events and format; its secret only by reference (secret_ref), never inline",
    ),
    access: section(
      SpecAccessKey,
      SpecAccessScope,
      MAX_SPEC_ACCESS,
      "access rows",
      "SSO access to this fleet only: group:<group> or email:<address> → read, write or admin (at most the applying token's scope)",
    ),
    servers: section(
      specHostname,
      SpecServer,
      MAX_SPEC_SERVERS,
      "servers",
      "Per hostname, labels merged into that server's (as PATCH /v1/servers/{id}); servers not named are untouched, and a hostname no server has yet waits for it to register",
    ),
  })
  .openapi("FleetSpec", {
    description:
      "Everything an operator declares about one fleet. A map section left out is empty; a setting left out is not managed.",
  });
export type FleetSpec = z.infer<typeof FleetSpec>;

const SPEC_SECTIONS = [
  "settings",
  "capabilities",
  "channels",
  "roles",
  "reboot_groups",
  "webhooks",
  "access",
  "servers",
] as const;

/**
 * What spec:diff and PUT …/spec take: the spec itself, or the spec and the secrets its webhooks'
 * `secret_ref`s name (hm sends the latter: the document stays as it is in git, the secrets come
 * from its environment).
 */
const SpecWithSecrets = z
  .strictObject({ spec: FleetSpec, secrets: SpecSecretsSchema.default({}) })
  .openapi("FleetSpecWithSecrets", {
    description: "A spec and the values of the environment variables its webhooks' secret_ref name",
  });
export const SpecRequest = z.union([FleetSpec, SpecWithSecrets]).openapi("FleetSpecRequest");
export type SpecRequest = z.infer<typeof SpecRequest>;

/** The spec of a request, and the secrets sent with it. */
export const unwrapRequest = (body: SpecRequest) =>
  "spec" in body ? body : { spec: body, secrets: {} as Record<string, string> };
export type SpecSection = (typeof SPEC_SECTIONS)[number];

const DIFF_OPS = ["add", "change", "remove", "unlisted"] as const;
export type DiffOp = (typeof DIFF_OPS)[number];

export const SpecProblem = z.object({ path: z.string(), message: z.string() }).openapi("FleetSpecProblem");

const DiffItem = z
  .object({
    section: z.enum(SPEC_SECTIONS),
    name: z.string(),
    path: z.string().openapi({ description: "Where the item is in the spec, e.g. roles.edge" }),
    op: z.enum(DIFF_OPS).openapi({
      description: "`unlisted`: in the fleet, not in the spec; left as it is (with prune it is `remove`)",
    }),
    before: z.unknown().openapi({ description: "The fleet's value; null for an add" }),
    after: z.unknown().openapi({ description: "The spec's value; null for a remove or an unlisted item" }),
    note: z.string().optional(),
  })
  .openapi("FleetSpecDiffItem");
export type DiffItem = z.infer<typeof DiffItem>;

const Replan = z
  .object({
    scope: z.enum(["none", "roles", "fleet"]),
    roles: z.array(z.string()),
    servers: z.number().int().openapi({ description: "Servers the planner would offer the new inputs" }),
    sample: z
      .array(z.object({ id: z.string(), hostname: z.string() }))
      .openapi({ description: "The first of them, by id" }),
  })
  .openapi("FleetSpecReplan");

export const SpecDiff = z
  .object({
    fleet: z.string(),
    prune: z.boolean(),
    exists: z.boolean().openapi({
      description:
        "false: the fleet does not exist; the items are against an empty fleet and applying creates it (If-None-Match: *)",
    }),
    equal: z.boolean().openapi({ description: "The fleet exists and is what the spec says: no item of any kind" }),
    etag: z.string().nullable().openapi({
      description:
        "The fleet's spec ETag the diff was computed against (If-Match for the apply); null when the fleet does not exist",
    }),
    summary: z.object({
      add: z.number().int(),
      change: z.number().int(),
      remove: z.number().int(),
      unlisted: z.number().int(),
    }),
    items: z.array(DiffItem),
    replan: Replan,
  })
  .openapi("FleetSpecDiff");
export type SpecDiff = z.infer<typeof SpecDiff>;

export const SpecApplied = SpecDiff.extend({
  etag: z.string().openapi({ description: "The fleet's spec ETag now" }),
  changed: z.boolean().openapi({ description: "Whether anything was written (an equal spec writes nothing)" }),
  created: z.boolean().openapi({ description: "The apply created the fleet (answered 201)" }),
  spec_hash: z.string().openapi({ description: "Hash of the applied spec, as its audit entry names it" }),
  planning: PlannerRunSchema.nullable(),
  coordinator: z.object({
    pending: z
      .boolean()
      .openapi({ description: "Reboot groups still on their way to the coordinator (the cron delivers them)" }),
  }),
}).openapi("FleetSpecApplied");

export const specQuery = z.object({
  prune: z.enum(["true", "false"]).optional().openapi({
    description: "true: items of the fleet the spec does not list are removed (else left and listed as unlisted)",
  }),
});
