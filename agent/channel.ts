/**
 * The host channel, the host's half: one WebSocket to GET /v1/agent/channel over which the server
 * pushes the desired config (and refresh requests, decommission orders) as they happen, and the
 * host reports, each report acknowledged with what PUT /v1/agent/inventory would answer. Messages:
 * src/model/server/channel-messages.ts (channel.schema.json); the fixed words: src/domain/channel.ts.
 *
 * The socket comes from a connector. The default one is the runtime's WebSocket: Node ≥ 22's
 * (undici) takes headers, so the token travels in `Authorization` as on every other host call;
 * where the WebSocket cannot set headers (browsers), `tokenIn: "protocol"` offers it as the
 * subprotocol `hm-token.<token>` instead (never in the URL, which proxies log).
 */
import { CHANNEL_PROTOCOL, CHANNEL_VERSION, PING, PONG, TOKEN_PROTOCOL_PREFIX } from "../src/domain/channel.ts";
import type { AckMessage, ServerMessage } from "../src/model/server/channel-messages.ts";
import type { InventoryReport } from "../src/model/server/schemas.ts";
import { ApiError, type FetchLike } from "./http.ts";
import { parseServerMessage, type ProtocolError } from "./protocol.ts";

/** What the agent needs of a WebSocket (the browser/Node WebSocket and workerd's both are). */
export interface ChannelSocket {
  send(data: string): void;
  close(code?: number, reason?: string): void;
  addEventListener(type: "message", listener: (event: { data: unknown }) => void): void;
  addEventListener(type: "close", listener: (event: { code: number; reason: string }) => void): void;
  addEventListener(type: "error", listener: (event: unknown) => void): void;
}

/** Opens a socket to `url` with these subprotocols and headers; rejects when it cannot (refused, unreachable). */
export type ChannelConnector = (
  url: string,
  init: { protocols: string[]; headers: Record<string, string> },
) => Promise<ChannelSocket>;

/** The runtime's WebSocket (Node ≥ 22, browsers with `tokenIn: "protocol"`). */
export const webSocketConnector =
  (timeoutMs = 15_000): ChannelConnector =>
  (url, init) =>
    new Promise((resolve, reject) => {
      // undici's WebSocket takes { protocols, headers }; a browser's takes the protocols only.
      const ws = new WebSocket(
        url,
        Object.keys(init.headers).length
          ? ({ protocols: init.protocols, headers: init.headers } as never)
          : init.protocols,
      );
      const where = url.replace(/\?.*$/, "");
      const fail = () => {
        clearTimeout(timer);
        reject(new Error(`channel to ${where} could not be opened`));
      };
      // A server (or a proxy) that takes the connection and never answers the upgrade would hold
      // the loop (no heartbeat, no HTTP fallback) for as long as the runtime waits: the agent's bound.
      const timer = setTimeout(() => {
        ws.removeEventListener("error", fail);
        ws.close();
        reject(new Error(`channel to ${where} did not open within ${timeoutMs / 1000} s`));
      }, timeoutMs);
      ws.addEventListener("open", () => {
        clearTimeout(timer);
        ws.removeEventListener("error", fail);
        resolve(ws as unknown as ChannelSocket);
      });
      ws.addEventListener("error", fail);
    });

export const connectWebSocket: ChannelConnector = webSocketConnector();

/**
 * A channel connector for the Workers runtime (workerd), where a WebSocket client is an upgrade
 * through `fetch`: the answer carries the socket. Refused (no socket) when it answers anything
 * but 101.
 */
export function connectThroughFetch(fetchImpl: FetchLike = (i, init) => fetch(i, init)): ChannelConnector {
  return async (url, init) => {
    const headers: Record<string, string> = { ...init.headers, Upgrade: "websocket" };
    if (init.protocols.length) headers["Sec-WebSocket-Protocol"] = init.protocols.join(", ");
    const res = await fetchImpl(url.replace(/^ws/, "http"), { headers });
    const ws = (res as Response & { webSocket?: WebSocket & { accept(): void } }).webSocket;
    if (res.status !== 101 || !ws) {
      await res.body?.cancel();
      throw new ApiError(res.status, `http_${res.status}`, `channel upgrade refused (${res.status})`);
    }
    ws.accept();
    return ws as unknown as ChannelSocket;
  };
}

export type ChannelEvent =
  | { kind: "message"; message: ServerMessage }
  /** A frame the protocol does not allow (./protocol.ts): dropped, and said. */
  | { kind: "invalid"; error: ProtocolError }
  | { kind: "closed"; code: number; reason: string }
  | { kind: "timeout" };

/**
 * One open channel: the messages queue up as they come; `next` takes them in order. A keep-alive
 * ping goes out every `pingMs`; a socket that has said nothing (not even a pong) for two of those
 * is taken for dead and closed.
 */
export class ChannelConnection {
  private readonly socket: ChannelSocket;
  private readonly queue: ChannelEvent[] = [];
  private wake: (() => void) | null = null;
  private lastHeard = Date.now();
  private readonly keepAlive: ReturnType<typeof setInterval>;
  private closed = false;
  private seq = 0;

  constructor(socket: ChannelSocket, pingMs: number) {
    this.socket = socket;
    socket.addEventListener("message", (e) => {
      // Frames still arriving after the close are no one's to read (nor to hold in memory).
      if (this.closed) return;
      this.lastHeard = Date.now();
      if (e.data === PONG || typeof e.data !== "string") return;
      try {
        const message = parseServerMessage(e.data);
        if (message) this.push({ kind: "message", message });
      } catch (err) {
        this.push({ kind: "invalid", error: err as ProtocolError });
      }
    });
    socket.addEventListener("close", (e) => this.end(e.code, e.reason));
    socket.addEventListener("error", () => this.end(1006, "socket error"));
    this.keepAlive = setInterval(() => {
      if (Date.now() - this.lastHeard > 2 * pingMs) this.close(4000, "no answer to keep-alive pings");
      else this.trySend(PING);
    }, pingMs);
  }

  /** The next event, or `timeout` after `ms`. */
  async next(ms: number, signal?: AbortSignal): Promise<ChannelEvent> {
    if (!this.queue.length && ms > 0 && !signal?.aborted) {
      await new Promise<void>((resolve) => {
        const done = () => {
          clearTimeout(timer);
          signal?.removeEventListener("abort", done);
          this.wake = null;
          resolve();
        };
        const timer = setTimeout(done, ms);
        signal?.addEventListener("abort", done, { once: true });
        this.wake = done;
      });
    }
    return this.queue.shift() ?? { kind: "timeout" };
  }

  /** Sends a report; the ack carries the returned id. */
  report(report: InventoryReport): string {
    const id = `r${++this.seq}`;
    this.trySend(JSON.stringify({ type: "report", v: CHANNEL_VERSION, id, report }));
    return id;
  }

  /** Waits for the ack of report `id`; other messages meanwhile stay queued, in order. */
  async ack(id: string, ms: number, signal?: AbortSignal): Promise<AckMessage | ChannelEvent> {
    const deadline = Date.now() + ms;
    for (;;) {
      const i = this.queue.findIndex(
        (e) => e.kind === "closed" || (e.kind === "message" && e.message.type === "ack" && e.message.id === id),
      );
      if (i >= 0) {
        const [e] = this.queue.splice(i, 1);
        return e.kind === "message" ? (e.message as AckMessage) : e;
      }
      const left = deadline - Date.now();
      if (left <= 0 || signal?.aborted) return { kind: "timeout" };
      await new Promise<void>((resolve) => {
        const timer = setTimeout(resolve, left);
        this.wake = () => {
          clearTimeout(timer);
          this.wake = null;
          resolve();
        };
      });
    }
  }

  /** Tells the server which generation the host holds (null: none); it sends `desired` unless that is current. */
  hello(generation: number | null) {
    this.trySend(JSON.stringify({ type: "hello", v: CHANNEL_VERSION, generation }));
  }

  close(code = 1000, reason = "done") {
    try {
      this.socket.close(code, reason);
    } catch {
      // already closed
    }
    this.end(code, reason);
  }

  private trySend(data: string) {
    try {
      this.socket.send(data);
    } catch {
      this.end(1006, "send failed");
    }
  }

  private end(code: number, reason: string) {
    if (this.closed) return;
    this.closed = true;
    clearInterval(this.keepAlive);
    this.push({ kind: "closed", code, reason });
  }

  private push(e: ChannelEvent) {
    this.queue.push(e);
    this.wake?.();
  }
}

/** The URL and the upgrade's subprotocols and headers for a host holding `generation`. */
export function channelRequest(
  baseUrl: string,
  token: string,
  generation: number | null,
  tokenIn: "header" | "protocol",
): { url: string; protocols: string[]; headers: Record<string, string> } {
  const url = new URL(`${baseUrl.replace(/\/+$/, "")}/v1/agent/channel`);
  url.protocol = url.protocol === "https:" ? "wss:" : url.protocol === "http:" ? "ws:" : url.protocol;
  if (generation !== null) url.searchParams.set("generation", String(generation));
  return tokenIn === "header"
    ? { url: url.toString(), protocols: [CHANNEL_PROTOCOL], headers: { Authorization: `Bearer ${token}` } }
    : { url: url.toString(), protocols: [CHANNEL_PROTOCOL, `${TOKEN_PROTOCOL_PREFIX}${token}`], headers: {} };
}
