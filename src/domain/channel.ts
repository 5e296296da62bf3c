/**
 * The host channel's fixed words (GET /v1/agent/channel; its messages: src/model/server/channel-messages.ts
 * and channel.schema.json). Pure, with no imports, so the reference agent (agent/) loads it in
 * Node as it is.
 */

export const CHANNEL_VERSION = 1;
/** The subprotocol a client offers (and the server selects) on the upgrade. */
export const CHANNEL_PROTOCOL = "harbormaster.v1";
/**
 * For clients that cannot set an Authorization header on a WebSocket upgrade (browsers): the
 * token as a second offered subprotocol, `hm-token.<token>` (never selected, so never echoed);
 * a URL would put it in every proxy's access log.
 */
export const TOKEN_PROTOCOL_PREFIX = "hm-token.";

/** Keep-alive: a host sends this text and the runtime answers PONG without waking the ledger. */
export const PING = "ping";
export const PONG = "pong";

/** Close codes the server uses (4000–4999 are the application's own, RFC 6455 §7.4.2). */
export const CLOSE_CODES = {
  /** A newer connection for the same server took over: at most one socket per server. */
  replaced: 4001,
  /** The token was revoked or rotated: reconnecting with it is refused (401). */
  token_revoked: 4401,
  /** The server was decommissioned (its acknowledgement, or a forced removal): nothing more will come. */
  decommissioned: 4410,
  /** Too many messages (RFC 6455 policy violation). */
  flood: 1008,
} as const;

/**
 * How long the index's staleness of a watched host is leased (src/ledger/projection.ts): one on the
 * channel (its socket watches) or reporting over HTTP (the ledger's quiet watch, src/ledger/quiet.ts).
 * A day: the lease is not what makes a silent host stale in the index. The socket's close (the
 * host's, or the edge's after 100 s without a keep-alive) or the quiet watch's durable timer writes
 * the exact stale_at as soon as the host goes quiet; the lease only bounds how late the index turns
 * stale when neither can run (a ledger reset while its host is gone, docs/storage.md), and every
 * refresh of it is 4 D1 rows written, so an hourly lease was 90 % of a channel host's D1 writes.
 */
export const INDEX_LEASE_MS = 24 * 60 * 60_000;

/**
 * More messages than this within one window closes the socket (1008): a host sends a report a
 * minute and the odd hello; this is a runaway client, not a busy one. Keep-alive pings answered
 * by the runtime are not messages the ledger sees.
 */
export const FLOOD_WINDOW_MS = 60_000;
export const FLOOD_MAX_MESSAGES = 30;
