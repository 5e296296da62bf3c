/**
 * ConsoleFeed: one per fleet, it holds the console pages' WebSockets and broadcasts "something
 * changed" notices to them. Sockets are accepted with the Hibernation API and keep-alive pings
 * are answered by the runtime (auto-response), so an idle page keeps no object awake: the object
 * runs only to accept a socket and to broadcast a notice.
 */
import { DurableObject } from "cloudflare:workers";
import type { Env } from "../env";
import {
  broadcast,
  SESSION_ENDED,
  sessionTag,
  tagOf,
  tokenTag,
  type FeedNotice,
  type SessionEnd,
  type SocketTag,
  UNEXPECTED_MESSAGE,
} from "./feed-fanout";

export class ConsoleFeed extends DurableObject<Env> {
  constructor(ctx: DurableObjectState, env: Env) {
    super(ctx, env);
    this.ctx.setWebSocketAutoResponse(new WebSocketRequestResponsePair("ping", "pong"));
  }

  /**
   * A socket from /console/live (already authenticated there); `until` is its session's expiry,
   * and it is tagged with its session and token, so that their end closes it (endSessions).
   */
  async fetch(request: Request): Promise<Response> {
    const { 0: client, 1: server } = new WebSocketPair();
    const session = request.headers.get("X-Session-Id");
    const token = request.headers.get("X-Session-Token");
    this.ctx.acceptWebSocket(server, [...(session ? [sessionTag(session)] : []), ...(token ? [tokenTag(token)] : [])]);
    server.serializeAttachment({ until: Number(request.headers.get("X-Session-Until")) || 0 } satisfies SocketTag);
    return new Response(null, { status: 101, webSocket: client });
  }

  /** Sends the notice to every open page; returns how many got it. */
  async notify(notice: FeedNotice): Promise<number> {
    return broadcast(this.ctx.getWebSockets(), notice, Date.now());
  }

  /** A session ended (signed out) or its token was revoked: its pages' sockets close now; how many. */
  async endSessions(end: SessionEnd, reason: string): Promise<number> {
    let closed = 0;
    for (const ws of this.ctx.getWebSockets(tagOf(end))) {
      try {
        ws.close(SESSION_ENDED, reason);
        closed++;
      } catch {
        // Closing already.
      }
    }
    return closed;
  }

  /**
   * Pages send only "ping", which the auto-response answers without waking this object: whatever
   * reaches here is not the console speaking. Ignoring it would let one socket wake the fleet's
   * feed at will (every page's notices go through it), so the socket is closed instead.
   */
  async webSocketMessage(ws: WebSocket) {
    try {
      ws.close(UNEXPECTED_MESSAGE, "pages send only 'ping'");
    } catch {
      // Closing already.
    }
  }

  async webSocketClose(ws: WebSocket, code: number) {
    try {
      ws.close(code === 1005 || code === 1006 ? 1000 : code, "closed");
    } catch {
      // Already closed.
    }
  }
}
