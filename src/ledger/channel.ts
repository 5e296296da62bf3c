/**
 * The host channel, the ledger's half (docs/host-agents.md): one hibernatable WebSocket per server,
 * over which the ledger pushes the desired config, refresh requests and decommission orders as
 * they happen, and the host reports, each report acknowledged with what PUT /v1/agent/inventory
 * would answer. Between messages the ledger sleeps; keep-alive pings are answered by the runtime
 * (setWebSocketAutoResponse) without waking it.
 *
 * What the socket must remember survives an eviction in its tags (the server, the token digest)
 * and its attachment (what was last sent, and the flood counter).
 */
import { STATUS_OF_CODE } from "../http/errors";
import { illFormedRefusal, refusalOf } from "../http/validation";
import { iso } from "../lib/time";
import { fail, type Failure } from "../objects/kit/result";
import { attachmentOf, closeSocket, overBytes, sendJson, setAttachment, type SocketRoom } from "../objects/kit/sockets";
import {
  CHANNEL_PROTOCOL,
  CHANNEL_VERSION,
  CLOSE_CODES,
  FLOOD_MAX_MESSAGES,
  FLOOD_WINDOW_MS,
  HelloMessage,
  HOST_MESSAGE_TYPES,
  MAX_CHANNEL_MESSAGE_BYTES,
  ReportMessage,
  type AckMessage,
  type HostMessage,
  type ServerMessage,
} from "../model/server/channel-messages";
import type { LedgerParts } from "./parts";
import { authorized } from "./poll";
import { pendingRefresh } from "./refresh";
import { acceptReport, reportAccepted } from "./report";
import { InventoryReport } from "../model/server/schemas";
import type { LedgerStore } from "./store";
import { configOf } from "./view";

export const HOST_TAG = "host";
const ORIGIN = "https://ledger.internal";
export const CHANNEL_PATH = "/channel";
const TOKEN_HASH = "X-Token-Hash";
const OFFERED = "X-Offered-Protocols";

/** What a host socket remembers across evictions. */
interface HostSocket {
  token: string;
  /**
   * The host's last heartbeat (an unchanged report: when it came, and the time it said it
   * reconciled), kept here rather than in storage: it outlives the ledger's eviction at no cost.
   * Null once the stored report is newer.
   */
  heard?: { at: number; reconciled_at: string } | null;
  /** The newest generation the host holds or was sent (null: none). */
  sent: number | null;
  /** The refresh request last sent (its requested_at). */
  refresh: number | null;
  /** Flood counter: messages since `window` began. */
  window: number;
  count: number;
}

/** The Worker's request that hands a host's upgrade to its ledger. */
export const channelRequest = (tokenHash: string, held: number | null, offered: string[]) =>
  new Request(`${ORIGIN}${CHANNEL_PATH}${held === null ? "" : `?generation=${held}`}`, {
    headers: { Upgrade: "websocket", [TOKEN_HASH]: tokenHash, [OFFERED]: offered.join(",") },
  });

const message = <T extends ServerMessage["type"]>(
  type: T,
  body: Omit<Extract<ServerMessage, { type: T }>, "type" | "v">,
) => ({ type, v: CHANNEL_VERSION, ...body }) as Extract<ServerMessage, { type: T }>;

/**
 * A host connects: its token must be the server's current one. A newer connection replaces an
 * older one (closed with CLOSE_CODES.replaced); the host is sent its desired config unless the
 * generation it says it holds is current. A refusal is answered as a domain failure (JSON).
 */
export function connectHost(d: LedgerParts, room: SocketRoom, request: Request): Response {
  const tokenHash = request.headers.get(TOKEN_HASH) ?? "";
  const record = authorized(d.store, tokenHash);
  if (!record) return Response.json(fail("unauthorized", "invalid server token"));
  const heldParam = new URL(request.url).searchParams.get("generation");
  const olders = room.list(HOST_TAG);
  // The heartbeat an older socket kept carries over to the new one.
  const heard = olders
    .map((ws) => attachmentOf<HostSocket>(ws).heard)
    .reduce((a, b) => (b && b.at > (a?.at ?? 0) ? b : a), null);
  for (const older of olders) closeSocket(older, CLOSE_CODES.replaced, "replaced by a newer connection");
  const offered = (request.headers.get(OFFERED) ?? "").split(",");
  const attachment: HostSocket = {
    token: tokenHash,
    sent: heldParam === null ? null : Number(heldParam),
    refresh: null,
    window: d.clock(),
    count: 0,
    heard,
  };
  const { socket, response } = room.accept(
    [HOST_TAG, `server:${record.id}`, `token:${tokenHash}`],
    attachment,
    offered.includes(CHANNEL_PROTOCOL) ? { "Sec-WebSocket-Protocol": CHANNEL_PROTOCOL } : undefined,
  );
  pushTo(d.store, socket, attachment);
  return response;
}

/**
 * After a write: sockets whose token no longer works are closed (`gone` is told of each before it
 * closes); the others are told what changed.
 */
export function pushToHosts(store: LedgerStore, room: SocketRoom, gone: (ws: WebSocket) => void) {
  for (const ws of room.list(HOST_TAG)) {
    const attachment = attachmentOf<HostSocket>(ws);
    if (authorized(store, attachment.token)) {
      pushTo(store, ws, attachment);
      continue;
    }
    gone(ws);
    closeSocket(ws, ...goneCode(store));
  }
}

/**
 * One message from a host. Answers on the socket; returns whether the outbox has something to
 * deliver (the surface then delivers it in the background, as for an HTTP report).
 */
export function hostMessage(d: LedgerParts, ws: WebSocket, raw: string | ArrayBuffer): boolean {
  const attachment = attachmentOf<HostSocket>(ws);
  const now = d.clock();
  if (now - attachment.window >= FLOOD_WINDOW_MS) Object.assign(attachment, { window: now, count: 0 });
  attachment.count++;
  setAttachment(ws, attachment);
  if (attachment.count > FLOOD_MAX_MESSAGES) {
    closeSocket(ws, CLOSE_CODES.flood, `more than ${FLOOD_MAX_MESSAGES} messages in ${FLOOD_WINDOW_MS / 1000} s`);
    return false;
  }
  const parsed = parseHostMessage(raw);
  if (parsed.kind === "refused") {
    sendJson(
      ws,
      message("error", parsed.id === undefined ? { error: parsed.error } : { id: parsed.id, error: parsed.error }),
    );
    return false;
  }
  const record = authorized(d.store, attachment.token);
  if (!record) {
    // The token changed after the socket opened (that closes it; this message crossed the close).
    const refusal = fail("unauthorized", "invalid server token");
    const reportId =
      parsed.kind === "invalid_report" ? parsed.id : parsed.message.type === "report" ? parsed.message.id : null;
    sendJson(ws, reportId === null ? message("error", { error: errorOf(refusal) }) : ackOf(reportId, refusal));
    closeSocket(ws, ...goneCode(d.store));
    return false;
  }
  if (parsed.kind === "invalid_report") {
    sendJson(ws, ackOf(parsed.id, parsed.error));
    return false;
  }
  const msg = parsed.message;
  if (msg.type === "hello") {
    attachment.sent = msg.generation;
    pushTo(d.store, ws, attachment);
    return false;
  }
  const { answer, enqueued, heartbeat } = acceptReport(d, record, msg.report, { keepsHeartbeat: true });
  if (answer.ok) {
    attachment.heard = heartbeat
      ? { at: d.store.load()!.report!.received_at, reconciled_at: msg.report.reconciled_at }
      : null;
    setAttachment(ws, attachment);
  }
  sendJson(
    ws,
    answer.ok
      ? message("ack", { id: msg.id, status: 200, body: reportAccepted(record.id, answer) })
      : ackOf(msg.id, answer),
  );
  return enqueued;
}

/**
 * After the ledger woke (or as a socket closes): the newest heartbeat its host sockets kept is
 * the ledger's heartbeat again, in memory (see HostSocket.heard); `persist` stores it too.
 */
export function restoreHeartbeat(store: LedgerStore, sockets: WebSocket[], persist = false) {
  store.restoreHeartbeat(sockets.map((ws) => attachmentOf<HostSocket>(ws).heard));
  if (persist) store.persistHeartbeat();
}

/** The close a socket gets once its token stopped working: decommissioned, or revoked. */
function goneCode(store: LedgerStore): [number, string] {
  const state = store.load();
  if (!state || state.record.state === "removed" || store.lifecycle()?.cleanup_from !== undefined) {
    return [CLOSE_CODES.decommissioned, "the server was decommissioned"];
  }
  return [CLOSE_CODES.token_revoked, "the token was revoked or rotated"];
}

/** Sends what the host does not know yet: a newer config (or order), else a pending refresh. */
function pushTo(store: LedgerStore, ws: WebSocket, attachment: HostSocket) {
  const state = store.load();
  if (!state) return;
  const refresh = pendingRefresh(store);
  const { desired, record } = state;
  if (attachment.sent !== desired.generation) {
    const config = configOf(record, desired);
    const sent =
      config.lifecycle === "run"
        ? sendJson(
            ws,
            message("desired", {
              config: refresh ? { ...config, refresh: { requested_at: iso(refresh.requested_at) } } : config,
            }),
          )
        : sendJson(ws, message("lifecycle", { order: config.lifecycle, config }));
    if (!sent) return;
    attachment.sent = desired.generation;
    attachment.refresh = refresh?.requested_at ?? attachment.refresh;
  } else if (refresh && attachment.refresh !== refresh.requested_at) {
    if (!sendJson(ws, message("refresh", { requested_at: iso(refresh.requested_at) }))) return;
    attachment.refresh = refresh.requested_at;
  } else {
    return;
  }
  setAttachment(ws, attachment);
}

type ErrorShape = { code: Failure["code"]; message: string; details?: unknown };

function ackOf(id: string, f: ErrorShape): AckMessage {
  return message("ack", { id, status: STATUS_OF_CODE[f.code], error: errorOf(f) });
}

const errorOf = (f: ErrorShape) =>
  f.details === undefined
    ? { code: f.code, message: f.message }
    : { code: f.code, message: f.message, details: f.details };

type ParsedHostMessage =
  | { kind: "message"; message: HostMessage }
  /** Answered with an `error`; nothing changes. */
  | { kind: "refused"; id?: string; error: ErrorShape }
  /** A report whose body PUT /v1/agent/inventory would refuse: answered with an ack carrying that refusal. */
  | { kind: "invalid_report"; id: string; error: ErrorShape };

const refused = (code: Failure["code"], text: string, details?: unknown, id?: string): ParsedHostMessage => ({
  kind: "refused",
  ...(id === undefined ? {} : { id }),
  error: errorOf({ code, message: text, details }),
});

/**
 * A message as the host sent it, or why it cannot be taken: not text, too large, not JSON, not a
 * known type or version, or not its type's shape. A report's body is checked as the HTTP route
 * checks it (same codes, same paths).
 */
function parseHostMessage(raw: string | ArrayBuffer): ParsedHostMessage {
  if (typeof raw !== "string") return refused("unsupported_media_type", "send messages as JSON text frames");
  if (overBytes(raw, MAX_CHANNEL_MESSAGE_BYTES))
    return refused("payload_too_large", `messages are limited to ${MAX_CHANNEL_MESSAGE_BYTES} bytes`);
  let json: unknown;
  try {
    json = JSON.parse(raw);
  } catch {
    return refused("malformed_json", "the message is not valid JSON");
  }
  const envelope =
    json !== null && typeof json === "object" && !Array.isArray(json) ? (json as Record<string, unknown>) : {};
  const id = typeof envelope.id === "string" ? envelope.id.slice(0, 64) : undefined;
  if (typeof envelope.type !== "string" || !(HOST_MESSAGE_TYPES as readonly string[]).includes(envelope.type)) {
    const known = HOST_MESSAGE_TYPES.join(", ");
    return refused(
      "validation_failed",
      `unknown message type ${JSON.stringify(envelope.type ?? null)} (known: ${known})`,
      [{ path: "type", message: "unknown message type" }],
      id,
    );
  }
  if (envelope.v !== CHANNEL_VERSION) {
    const text = `unsupported version ${JSON.stringify(envelope.v ?? null)}; this server speaks ${CHANNEL_VERSION}`;
    return refused("validation_failed", text, [{ path: "v", message: "unsupported version" }], id);
  }
  if (envelope.type === "hello") {
    const hello = HelloMessage.safeParse(envelope);
    return hello.success
      ? { kind: "message", message: hello.data }
      : { kind: "refused", id, error: errorOf(refusalOf(hello.error, "message")) };
  }
  const { report, ...head } = envelope;
  const parsedHead = ReportMessage.omit({ report: true }).safeParse(head);
  if (!parsedHead.success) return { kind: "refused", id, error: errorOf(refusalOf(parsedHead.error, "message")) };
  const body = InventoryReport.safeParse(report);
  if (!body.success)
    return { kind: "invalid_report", id: parsedHead.data.id, error: errorOf(refusalOf(body.error, "json")) };
  const illFormed = illFormedRefusal(body.data);
  if (illFormed) return { kind: "invalid_report", id: parsedHead.data.id, error: errorOf(illFormed) };
  return { kind: "message", message: { ...parsedHead.data, report: body.data } };
}
