import { z } from "@hono/zod-openapi";
import { CAPABILITY_NAME, fleetParam, roleName } from "../fleets/schemas";
import { agentName, imageRef, versionString } from "../model/server/schemas";

import { MAX_ROLE_AGENTS } from "../domain/limits";
import { StrategyInput } from "../model/strategy";

/** An image by its catalog id, or by name and version (in a fleet with image_policy "any", any image string). */
export const ChannelInput = z
  .union([z.strictObject({ image: imageRef, version: versionString }), z.strictObject({ image_id: z.uuid() })])
  .openapi("ChannelInput");

export const Channel = z
  .object({
    fleet: z.string(),
    agent: z.string(),
    image: z.string(),
    version: z.string(),
    image_id: z
      .string()
      .nullable()
      .openapi({ description: "The catalog image the channel names; null: a free-form image" }),
    rollout: z.object({ strategy: StrategyInput }).nullable().openapi({
      description:
        "How the agent's rollouts go when POST /v1/rollouts names no strategy (a fleet spec's channels.<agent>.rollout); null: one wave",
    }),
    updated_at: z.string(),
    updated_by: z.string(),
  })
  .openapi("Channel");

export const ChannelChange = z
  .object({
    image: z.string(),
    version: z.string(),
    previous: z.object({ image: z.string(), version: z.string() }).nullable(),
    at: z.string(),
    actor: z.string(),
  })
  .openapi("ChannelChange");

/** `"firewall"`: the capability is true; `"!object_storage"`: it is not. */
const condition = z
  .string()
  .regex(new RegExp(`^!?${CAPABILITY_NAME.source.slice(1, -1)}$`), "a capability name, optionally prefixed with '!'");

const RoleAgent = z.strictObject({ name: agentName, when: condition.optional() }).openapi("RoleAgent");

export const RoleInput = z
  .strictObject({
    agents: z
      .array(RoleAgent)
      .max(MAX_ROLE_AGENTS)
      .superRefine((items, ctx) => {
        const seen = new Set<string>();
        items.forEach((a, i) => {
          if (seen.has(a.name)) {
            ctx.addIssue({
              code: "custom",
              path: [i, "name"],
              message: `agent '${a.name}' appears more than once`,
              params: { code: "duplicate_agent" },
            });
          }
          seen.add(a.name);
        });
      }),
  })
  .openapi("RoleInput");
export type RoleInput = z.infer<typeof RoleInput>;

export const Role = z
  .object({
    fleet: z.string(),
    role: z.string(),
    agents: z.array(z.object({ name: z.string(), when: z.string().optional() })),
    updated_at: z.string(),
    updated_by: z.string(),
  })
  .openapi("Role");

export const channelParams = fleetParam.extend({ agent: agentName });
export const roleParams = fleetParam.extend({ role: roleName });

export const PlannerRunSchema = z
  .object({
    servers: z.number().int().openapi({ description: "servers offered the new inputs" }),
    issued: z.number().int().openapi({ description: "servers given a new generation (their plan differed)" }),
    failed: z.number().int().openapi({ description: "servers left marked for a retry" }),
    remaining: z.boolean().openapi({ description: "planning goes on in the background" }),
  })
  .openapi("PlannerRun");
