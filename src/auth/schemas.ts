import { z } from "@hono/zod-openapi";
import { OPERATOR_SCOPES, TOKEN_KINDS, TOKEN_SCOPES } from "../domain/enums";
import { fleetId } from "../model/fleet";

/** The most fleets one token may name: a longer list is a "*" token in disguise, or a mistake. */
const MAX_TOKEN_FLEETS = 100;

export const FleetAccessSchema = z
  .union([
    z.literal("*"),
    z
      .array(fleetId)
      .min(1, 'name at least one fleet, or "*"')
      .max(MAX_TOKEN_FLEETS)
      .refine((names) => new Set(names).size === names.length, "a fleet is named twice"),
  ])
  .openapi("FleetAccess", {
    description: 'The fleets the token may act on: "*" (every fleet, present and future) or a list of fleet names',
    example: ["web", "db"],
  });

export const TokenInput = z
  .strictObject({
    name: z.string().min(1).max(200),
    scope: z.enum(OPERATOR_SCOPES),
    fleets: FleetAccessSchema.optional().openapi({
      description: "Default: the fleets of the token that creates it; a token can grant only fleets it has itself",
    }),
    description: z.string().trim().min(1).max(500).optional().openapi({ description: "What the token is for" }),
    expires_at: z.iso
      .datetime({ offset: true })
      .optional()
      .openapi({ description: "When it stops working (in the future); absent: never" }),
  })
  .openapi("TokenInput");
export type TokenInput = z.infer<typeof TokenInput>;

export const Token = z
  .object({
    id: z.string(),
    kind: z.enum(TOKEN_KINDS),
    scope: z.enum(TOKEN_SCOPES),
    server_id: z.string().nullable(),
    name: z.string(),
    fleets: z.union([z.literal("*"), z.array(z.string())]),
    description: z.string().nullable(),
    created_by: z.string(),
    created_at: z.string(),
    expires_at: z.string().nullable(),
    revoked_at: z.string().nullable(),
    state: z.enum(["active", "expired", "revoked"]).openapi({ description: "Whether it is accepted now" }),
  })
  .openapi("Token");
