import { z } from "@hono/zod-openapi";
import { WEBHOOK_EVENTS } from "./events";
import { WEBHOOK_FORMATS } from "../domain/enums";
import { userKeyed } from "../lib/user-keys";

const MAX_WEBHOOK_URL_LENGTH = 2048;
/** Webhook bodies are a few hundred bytes; anything much larger is a mistake, refused with 413. */
export const MAX_WEBHOOK_BODY_BYTES = 16 * 1024;

export const WebhookInputSchema = z
  .strictObject({
    url: z
      .string()
      .max(MAX_WEBHOOK_URL_LENGTH)
      // A pattern JSON Schema validators read the same (no escaped slashes, no flags).
      .regex(new RegExp("^https?://"), "must start with https://")
      .openapi({ format: "uri", example: "https://hooks.slack.com/services/T000/B000/XXXX" }),
    events: z
      .array(
        z.enum(WEBHOOK_EVENTS, {
          error: (i) => `'${String(i.input)}' is not an event; one of ${WEBHOOK_EVENTS.join(", ")}`,
        }),
      )
      .min(1)
      .max(WEBHOOK_EVENTS.length)
      .openapi({ description: "The events it is sent (docs/notifications.md)" }),
    format: z.enum(WEBHOOK_FORMATS).default("cloudevents").openapi({
      description:
        "cloudevents: CloudEvents 1.0 JSON (structured mode); slack: {\"text\": …}, for Slack's and chat tools' incoming webhooks",
    }),
    description: z.string().trim().max(500).nullable().optional(),
    secret: z.string().min(16).max(256).optional().openapi({
      description: "The signing secret; omitted: one is made. Answered once, in this response, and never again",
    }),
  })
  .openapi("WebhookInput");

/** An environment variable's name, as a spec's `secret_ref` names one. */
const envName = z
  .string()
  .max(128)
  .regex(
    /^[A-Za-z_][A-Za-z0-9_]*$/,
    "an environment variable's name: letters, digits and _, not starting with a digit",
  );

/**
 * A webhook in a fleet spec (src/specs/): what POST …/webhooks takes, except the secret, which a
 * spec never carries: `secret_ref` names the environment variable hm reads it from when applying.
 */
export const SpecWebhookSchema = z
  .strictObject({
    url: WebhookInputSchema.shape.url,
    events: WebhookInputSchema.shape.events,
    format: WebhookInputSchema.shape.format,
    description: WebhookInputSchema.shape.description,
    secret_ref: z.strictObject({ env: envName }).optional().openapi({
      description:
        "Where the signing secret comes from: hm reads this environment variable and sends its value with the spec (never stored in the spec). Left out: the webhook keeps its secret; a new webhook needs one",
    }),
  })
  .openapi("FleetSpecWebhook");
export type SpecWebhook = z.infer<typeof SpecWebhookSchema>;

/** The secrets hm sends alongside a spec: by environment variable name, the values its `secret_ref`s name. */
export const SpecSecretsSchema = userKeyed(z.record(envName, WebhookInputSchema.shape.secret.unwrap())).openapi({
  description:
    "Values of the environment variables the spec's webhooks name in secret_ref; never stored, never answered",
});

export const WebhookSchema = z
  .object({
    id: z.string(),
    name: z
      .string()
      .nullable()
      .openapi({ description: "Its name in the fleet spec; null when added through this API (a spec names it by id)" }),
    url: z.string(),
    events: z.array(z.string()),
    format: z.enum(WEBHOOK_FORMATS),
    description: z.string().nullable(),
    created_at: z.string(),
    created_by: z.string(),
  })
  .openapi("Webhook");

export const WebhookCreatedSchema = z
  .object({
    webhook: WebhookSchema,
    secret: z.string().openapi({ description: "Shown only here: verify X-Harbormaster-Signature with it" }),
  })
  .openapi("WebhookCreated");

export const DeliverySchema = z
  .object({
    id: z.string().openapi({ description: "Sent as X-Harbormaster-Delivery; the same on every retry" }),
    event_id: z.string(),
    event: z.string(),
    status: z
      .enum(["pending", "delivered", "failed"])
      .openapi({ description: "pending: still being tried (with backoff, for up to 24 h)" }),
    attempts: z.number().int(),
    created_at: z.string(),
    last_attempt_at: z.string().nullable(),
    delivered_at: z.string().nullable(),
    last_status: z.number().int().nullable().openapi({ description: "The HTTP status of the last attempt" }),
    last_error: z.string().nullable(),
  })
  .openapi("WebhookDelivery");
