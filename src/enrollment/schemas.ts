import { z } from "@hono/zod-openapi";
import { SERVER_KINDS } from "../domain/enums";
import { MAX_SERVER_ROLES } from "../domain/limits";
import { fleetlockId, fleetParam, groupName, roleName } from "../fleets/schemas";
import { HOSTNAME } from "../servers/naming";
import { labelsSchema } from "../model/server/labels";
import { patternProblem } from "./pattern";

/** The longest an enrollment token may live: one that leaks stops working within a month at most. */
export const MAX_ENROLLMENT_TTL_MS = 30 * 24 * 3600 * 1000;
const MAX_ENROLLMENT_USES = 100_000;

const hostnamePattern = z
  .string()
  .superRefine((p, ctx) => {
    const problem = patternProblem(p);
    if (problem) ctx.addIssue({ code: "custom", message: problem });
  })
  .openapi({
    description:
      "Hostnames this token may enroll: `*` any run of hostname characters, `?` one (e.g. `web-*.example.com`); lower case, at most 253 characters and 8 wildcards",
    example: "web-*.example.com",
  });

export const EnrollmentTokenInput = z
  .strictObject({
    name: z
      .string()
      .trim()
      .min(1)
      .max(100)
      .optional()
      .openapi({ description: "What the token is for (shown in lists)" }),
    roles: z
      .array(roleName)
      .max(MAX_SERVER_ROLES)
      .default([])
      .openapi({ description: "The roles of every server it enrolls" }),
    reboot_group: groupName.default("default"),
    labels: labelsSchema.default({}).openapi({
      description: "Labels every server it enrolls gets; the enroll body's own labels win on a shared key",
      example: { zone: "eu-1a" },
    }),
    kind: z
      .enum(SERVER_KINDS)
      .default("managed")
      .openapi({ description: "The kind of every server it enrolls (as POST /v1/servers)" }),
    expires_at: z.iso
      .datetime({ offset: true })
      .openapi({ description: "Required; in the future and at most 30 days ahead" }),
    max_uses: z
      .number()
      .int()
      .min(1)
      .max(MAX_ENROLLMENT_USES)
      .default(1)
      .openapi({ description: "How many machines it may enroll" }),
    hostname_pattern: hostnamePattern.optional(),
  })
  .openapi("EnrollmentTokenInput");
export type EnrollmentTokenInput = z.infer<typeof EnrollmentTokenInput>;

/**
 * A client's name for one create, so a retry whose first answer was lost gets that token, not a
 * second one (docs/images-and-enrollment.md). Printable ASCII without spaces, as an HTTP token.
 */
export const idempotencyHeaders = z.object({
  "idempotency-key": z
    .string()
    .min(1)
    .max(255)
    .regex(/^[\x21-\x7e]+$/, "1-255 printable ASCII characters, no spaces")
    .optional()
    .openapi({
      description:
        "Any unique string per create (a UUID): the same key with the same request answers the same token " +
        "(its secret issued again, the one the lost answer carried no longer valid); with another request, 409 `idempotency_key_reused`",
      example: "7d7a1bd4-58c1-4a43-9d55-3f9b8f3d0d6e",
    }),
});

/** Set on a create answered again for its Idempotency-Key (the name Stripe's API gives it). */
export const REPLAYED_HEADER = "Idempotent-Replayed";

export const EnrollmentToken = z
  .object({
    id: z.string(),
    fleet: z.string(),
    name: z.string().nullable(),
    roles: z.array(z.string()),
    reboot_group: z.string(),
    labels: z.record(z.string(), z.string()),
    kind: z.enum(SERVER_KINDS),
    hostname_pattern: z.string().nullable(),
    max_uses: z.number().int(),
    uses: z.number().int(),
    expires_at: z.string(),
    created_at: z.string(),
    created_by: z.string(),
    revoked_at: z.string().nullable(),
    last_used_at: z.string().nullable(),
    state: z
      .enum(["active", "expired", "used_up", "revoked"])
      .openapi({ description: "Whether it can enroll a new machine now" }),
  })
  .openapi("EnrollmentToken");

export const EnrollmentTokenCreated = EnrollmentToken.extend({
  token: z.string().openapi({ description: "`hme.<id>.<secret>`: shown only here", example: "hme.…" }),
}).openapi("EnrollmentTokenCreated");

export const EnrollInput = z
  .strictObject({
    hostname: z.string().max(253).regex(HOSTNAME, "not a valid hostname"),
    machine_id: z
      .string()
      .regex(/^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$/, "1-128 characters of letters, digits, '_', '.', ':' and '-'")
      .openapi({
        description: "The machine's stable id (/etc/machine-id): a retry with the same id is the same enrollment",
      }),
    boot_id: z.string().min(1).max(128).openapi({ description: "/proc/sys/kernel/random/boot_id" }),
    fleetlock_id: fleetlockId.optional(),
    labels: labelsSchema.optional().openapi({
      description: "The machine's own labels (its zone, its rack), merged over the token's",
      example: { zone: "eu-1a", rack: "r12" },
    }),
  })
  .openapi("EnrollInput");
export type EnrollInput = z.infer<typeof EnrollInput>;

export const tokenParams = fleetParam.extend({ id: z.uuid() });
