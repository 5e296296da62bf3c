/**
 * The host channel's messages (GET /v1/agent/channel, a WebSocket): JSON text frames, each with a
 * `type` and the protocol version `v`. These schemas validate what the ledger receives, type what
 * the reference agent sends, and generate the committed message document (channel.schema.json,
 * next to openapi.json; a test keeps the two the same). docs/host-agents.md describes the protocol.
 */
import { z } from "@hono/zod-openapi";
import { MAX_BODY_BYTES } from "../../domain/limits";
import {
  CHANNEL_PROTOCOL,
  CHANNEL_VERSION,
  CLOSE_CODES,
  FLOOD_MAX_MESSAGES,
  FLOOD_WINDOW_MS,
  PING,
  PONG,
  TOKEN_PROTOCOL_PREFIX,
} from "../../domain/channel";
import { DesiredConfig, HostDesiredConfig, InventoryReport, ReportAccepted } from "./schemas";

export * from "../../domain/channel";

/** A message is at most as large as a request body under /v1 (a report's largest). */
export const MAX_CHANNEL_MESSAGE_BYTES = MAX_BODY_BYTES;

const v = z.literal(CHANNEL_VERSION);

/** The API's error shape, as in an HTTP error body. */
const ChannelError = z.object({ code: z.string(), message: z.string(), details: z.unknown().optional() });

// ---- host → server ----

export const HelloMessage = z
  .strictObject({
    type: z.literal("hello"),
    v,
    /** The generation the host holds (null: none yet); the server sends `desired` unless it is current. */
    generation: z.number().int().min(0).max(Number.MAX_SAFE_INTEGER).nullable(),
  })
  .describe("Optional first message (the upgrade's `generation` query parameter says the same)");

export const ReportMessage = z
  .strictObject({
    type: z.literal("report"),
    v,
    /** Chosen by the host; the ack carries it back. */
    id: z.string().min(1).max(64),
    /** Exactly the body of PUT /v1/agent/inventory. */
    report: InventoryReport,
  })
  .describe("An inventory report; answered by an `ack` with the same id");

export const HostMessage = z.discriminatedUnion("type", [HelloMessage, ReportMessage]);
export type HostMessage = z.infer<typeof HostMessage>;
export const HOST_MESSAGE_TYPES = ["hello", "report"] as const;

// ---- server → host ----

const DesiredMessage = z
  .object({ type: z.literal("desired"), v, config: HostDesiredConfig })
  .describe(
    "A new desired config to reconcile against (on connect when the host's is not current, and on every change)",
  );

const LifecycleMessage = z
  .object({ type: z.literal("lifecycle"), v, order: z.enum(["terminate", "uninstall"]), config: DesiredConfig })
  .describe("A decommission order: the desired config that carries it; reconcile and report as for `desired`");

const RefreshMessage = z
  .object({ type: z.literal("refresh"), v, requested_at: z.string() })
  .describe("An operator asks for a report now");

export const AckMessage = z
  .object({
    type: z.literal("ack"),
    v,
    id: z.string(),
    /** The status PUT /v1/agent/inventory would have answered. */
    status: z.number().int(),
    body: ReportAccepted.optional(),
    error: ChannelError.optional(),
  })
  .describe(
    "The answer to a `report`: `body` as the HTTP route's 200, or `error` with the status it would have refused with",
  );

const ErrorMessage = z
  .object({ type: z.literal("error"), v, id: z.string().optional(), error: ChannelError })
  .describe("A message the server could not take (malformed, oversized, unknown, unauthorized); nothing changed");

export const ServerMessage = z.discriminatedUnion("type", [
  DesiredMessage,
  LifecycleMessage,
  RefreshMessage,
  AckMessage,
  ErrorMessage,
]);
export type ServerMessage = z.infer<typeof ServerMessage>;
export type AckMessage = z.infer<typeof AckMessage>;

/**
 * The committed message document (channel.schema.json, beside openapi.json): JSON Schema 2020-12
 * of both directions, generated from the schemas above, with what the schemas cannot say (the
 * endpoint, keep-alive, close codes, limits) in its description and `x-` fields.
 */
export function channelMessageDocument() {
  const def = (schema: z.ZodType, io: "input" | "output") => {
    const { $schema: _drop, ...rest } = z.toJSONSchema(schema, { io, target: "draft-2020-12" }) as Record<
      string,
      unknown
    >;
    return rest;
  };
  return {
    $schema: "https://json-schema.org/draft/2020-12/schema",
    title: `Harbormaster host channel, messages v${CHANNEL_VERSION}`,
    description:
      "Messages of GET /v1/agent/channel (a WebSocket; the upgrade is in openapi.json): JSON text frames, each " +
      "with `type` and the version `v`. HostMessage: host to server; ServerMessage: server to host. A `report` is " +
      "answered by an `ack` with the same `id`, carrying what PUT /v1/agent/inventory would answer (its status, " +
      "and its body or its error). A message the server cannot take gets an `error` and changes nothing. " +
      `Keep-alive: the text frame \`${PING}\` is answered \`${PONG}\` (not JSON, not a message).`,
    "x-subprotocol": CHANNEL_PROTOCOL,
    "x-token-subprotocol-prefix": TOKEN_PROTOCOL_PREFIX,
    "x-max-message-bytes": MAX_CHANNEL_MESSAGE_BYTES,
    "x-flood": { window_ms: FLOOD_WINDOW_MS, max_messages: FLOOD_MAX_MESSAGES, close_code: CLOSE_CODES.flood },
    "x-close-codes": CLOSE_CODES,
    oneOf: [{ $ref: "#/$defs/HostMessage" }, { $ref: "#/$defs/ServerMessage" }],
    $defs: { HostMessage: def(HostMessage, "input"), ServerMessage: def(ServerMessage, "output") },
  };
}
