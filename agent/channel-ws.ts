/**
 * The host channel's socket in Node, through `ws` rather than the runtime's WebSocket (Node only:
 * the Workers runtime cannot load it). undici's WebSocket hands a message over only once it holds
 * all of it, so a server (or anything posing as one) could make the agent buffer a frame of any
 * size before ./protocol.ts could refuse it; `ws` reads a frame's declared length from its header
 * and refuses one over `maxPayload` (its documented limit, counted across a fragmented message
 * too) before reading its payload. The socket is then dropped at once and the channel reported
 * closed with 1009 (message too big), the code the protocol gives that refusal: the loop
 * reconnects after its delay, as after any other drop.
 */
import WebSocket from "ws";
import type { ChannelConnector, ChannelSocket } from "./channel.ts";
import { MAX_DESIRED_BYTES } from "./protocol.ts";

/** The close code of a message too big to take (RFC 6455, section 7.4.1). */
export const MESSAGE_TOO_BIG = 1009;

/**
 * A connector whose socket refuses any message over `maxPayload` bytes from its frame header.
 * `timeoutMs` bounds the upgrade, as ./channel.ts's webSocketConnector does.
 */
export const wsConnector =
  (maxPayload = MAX_DESIRED_BYTES, timeoutMs = 15_000): ChannelConnector =>
  (url, init) =>
    new Promise((resolve, reject) => {
      const ws = new WebSocket(url, init.protocols, {
        headers: init.headers,
        maxPayload,
        handshakeTimeout: timeoutMs,
        // The channel's messages are small JSON; a compressed frame would be inflated before its
        // size is known, so none is offered.
        perMessageDeflate: false,
      });
      // Wrapped at once: a message the server sends right after the upgrade can come in the
      // same read as the upgrade's answer, and ws emits it before the caller has its socket.
      const socket = new WsSocket(ws, maxPayload);
      const where = url.replace(/\?.*$/, "");
      const refused = (err: Error) =>
        reject(
          new Error(
            /timed out/i.test(err.message)
              ? `channel to ${where} did not open within ${timeoutMs / 1000} s`
              : `channel to ${where} could not be opened: ${err.message}`,
          ),
        );
      ws.once("error", refused);
      ws.once("open", () => {
        ws.off("error", refused);
        resolve(socket);
      });
    });

/**
 * A `ws` socket as the channel uses one (./channel.ts's ChannelSocket). ws emits events as they
 * come, to whoever listens then; what comes before the channel's listeners are added (a message
 * sent with the upgrade's answer, a close) is kept and handed to them when they are.
 */
class WsSocket implements ChannelSocket {
  private readonly ws: WebSocket;
  private readonly maxPayload: number;
  /** Set when a message over the limit was refused: the close then says so. */
  private tooBig = false;
  private readonly listeners = {
    message: [] as ((event: { data: unknown }) => void)[],
    close: [] as ((event: { code: number; reason: string }) => void)[],
    error: [] as ((event: unknown) => void)[],
  };
  private readonly early = {
    message: [] as { data: unknown }[],
    close: [] as { code: number; reason: string }[],
    error: [] as unknown[],
  };

  constructor(ws: WebSocket, maxPayload: number) {
    this.ws = ws;
    this.maxPayload = maxPayload;
    ws.on("message", (data: Buffer, isBinary: boolean) =>
      this.dispatch("message", { data: isBinary ? data : data.toString() }),
    );
    ws.on("close", (code: number, reason: Buffer) =>
      this.dispatch(
        "close",
        this.tooBig
          ? { code: MESSAGE_TOO_BIG, reason: `a message over ${this.maxPayload} bytes was refused unread` }
          : { code, reason: reason.toString() },
      ),
    );
    ws.on("error", (err: Error & { code?: string }) => {
      if (err.code === "WS_ERR_UNSUPPORTED_MESSAGE_LENGTH") {
        // Dropped now (a graceful close would wait on the very peer that sent it); the close
        // that follows says why, not a socket error.
        this.tooBig = true;
        ws.terminate();
        return;
      }
      this.dispatch("error", err);
    });
  }

  private dispatch<K extends keyof WsSocket["listeners"]>(
    type: K,
    event: Parameters<WsSocket["listeners"][K][number]>[0],
  ) {
    const listeners = this.listeners[type] as ((e: typeof event) => void)[];
    if (listeners.length === 0) (this.early[type] as (typeof event)[]).push(event);
    for (const l of listeners) l(event);
  }

  send(data: string) {
    this.ws.send(data);
  }

  close(code?: number, reason?: string) {
    this.ws.close(code, reason);
  }

  addEventListener(type: "message", listener: (event: { data: unknown }) => void): void;
  addEventListener(type: "close", listener: (event: { code: number; reason: string }) => void): void;
  addEventListener(type: "error", listener: (event: unknown) => void): void;
  addEventListener(type: "message" | "close" | "error", listener: (event: never) => void) {
    (this.listeners[type] as unknown[]).push(listener);
    const kept = this.early[type].splice(0);
    for (const e of kept) (listener as (event: unknown) => void)(e);
  }
}
