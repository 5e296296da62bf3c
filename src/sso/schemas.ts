import { z } from "@hono/zod-openapi";
import { OPERATOR_SCOPES } from "../domain/enums";
import { FleetAccessSchema } from "../auth/schemas";

/** An email or group is printed in tables and terminals. */
// oxlint-disable-next-line no-control-regex -- finding control characters is the point
const PRINTABLE = /^[^\u0000-\u001f\u007f-\u009f]*$/;

export const SsoMappingInput = z
  .strictObject({
    kind: z.enum(["email", "group"]).openapi({ description: "Match the user's email, or one of their groups" }),
    value: z
      .string()
      .trim()
      .min(1)
      .max(320)
      .regex(PRINTABLE, "control characters are not allowed")
      .openapi({ description: "The email (case does not matter) or the group name as the provider sends it" }),
    scope: z.enum(OPERATOR_SCOPES),
    fleets: FleetAccessSchema,
    description: z.string().trim().min(1).max(500).optional(),
  })
  .openapi("SsoMappingInput");
export type SsoMappingInput = z.infer<typeof SsoMappingInput>;

/** The most `access:` rows one fleet's spec may hold: a team's groups and a few people, not a directory. */
export const MAX_SPEC_ACCESS = 100;

/**
 * A key of a fleet spec's `access:` section: `group:<name as the provider sends it>` or
 * `email:<address>`. An email is written as it is kept, trimmed and lower-case, so the spec, its
 * diff and the fleet agree on it (providers differ in case; sign-ins are compared lower-cased).
 */
export const SpecAccessKey = z
  .string()
  .max(326)
  .regex(PRINTABLE, "control characters are not allowed")
  .regex(
    /^(group|email):\S(.*\S)?$/,
    "access keys are group:<group> or email:<address>, without spaces around the name",
  )
  .refine((k) => !k.startsWith("email:") || (k.includes("@") && k === k.toLowerCase()), {
    message: "an email key is the address in lower case (email:ana@example.com)",
  });

export const SpecAccessScope = z
  .enum(OPERATOR_SCOPES)
  .openapi({ description: "What the email or group may do on this fleet, and on no other" });

export const SsoMapping = z
  .object({
    id: z.string(),
    kind: z.enum(["email", "group"]),
    value: z.string(),
    scope: z.enum(OPERATOR_SCOPES),
    fleets: z.union([z.literal("*"), z.array(z.string())]),
    description: z.string().nullable(),
    created_by: z.string(),
    created_at: z.string(),
  })
  .openapi("SsoMapping");

export const SpecSsoMapping = z
  .object({
    fleet: z.string().openapi({ description: "The fleet whose spec declares the row: the only fleet it reaches" }),
    kind: z.enum(["email", "group"]),
    value: z.string(),
    scope: z.enum(OPERATOR_SCOPES),
  })
  .openapi("SpecSsoMapping");

export const SsoSession = z
  .object({
    token_id: z.string(),
    provider: z.enum(["access", "oidc"]),
    subject: z.string(),
    email: z.string().nullable(),
    client: z.enum(["console", "cli"]),
    scope: z.enum(OPERATOR_SCOPES),
    fleets: z.union([z.literal("*"), z.array(z.string())]),
    created_at: z.string(),
    expires_at: z.string(),
  })
  .openapi("SsoSession");

/** hm's loopback listener: plain http on a loopback address with a port, nothing else. */
const loopbackUri = z
  .url()
  .max(200)
  .refine((v) => {
    const u = URL.parse(v);
    return !!u && u.protocol === "http:" && ["127.0.0.1", "[::1]", "localhost"].includes(u.hostname) && u.port !== "";
  }, "redirect_uri must be http://127.0.0.1:<port>/… (hm's loopback listener)");
const b64url43 = z.string().regex(/^[A-Za-z0-9_-]{43,128}$/, "43-128 characters of base64url");

export const CliStart = z
  .strictObject({
    redirect_uri: loopbackUri,
    code_challenge: b64url43.openapi({ description: "base64url(SHA-256(code_verifier)), as PKCE's S256" }),
  })
  .openapi("CliSignInStart");

export const CliExchange = z.strictObject({ code: b64url43, code_verifier: b64url43 }).openapi("CliSignInExchange");
