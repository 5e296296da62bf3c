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
        resolve(new WsSocket(ws, maxPayload));
      });
    });

/** A `ws` socket as the channel uses one (./channel.ts's ChannelSocket). */
class WsSocket implements ChannelSocket {
  private readonly ws: WebSocket;
  private readonly maxPayload: number;
  /** Set when a message over the limit was refused: the close then says so. */
  private tooBig = false;

  constructor(ws: WebSocket, maxPayload: number) {
    this.ws = ws;
    this.maxPayload = maxPayload;
    ws.on("error", (err: Error & { code?: string }) => {
      if (err.code !== "WS_ERR_UNSUPPORTED_MESSAGE_LENGTH") return;
      // Dropped now: a graceful close would wait on the very peer that sent it.
      this.tooBig = true;
      ws.terminate();
    });
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
    const call = listener as (event: unknown) => void;
    if (type === "message")
      this.ws.on("message", (data: Buffer, isBinary: boolean) => call({ data: isBinary ? data : data.toString() }));
    else if (type === "close")
      this.ws.on("close", (code: number, reason: Buffer) =>
        call(
          this.tooBig
            ? { code: MESSAGE_TOO_BIG, reason: `a message over ${this.maxPayload} bytes was refused unread` }
            : { code, reason: reason.toString() },
        ),
      );
    else
      this.ws.on("error", (err: Error & { code?: string }) => {
        // The refusal is told by the close (above), not as a socket error.
        if (err.code !== "WS_ERR_UNSUPPORTED_MESSAGE_LENGTH") call(err);
      });
  }
}
