/**
 * ConsoleFeed: one per fleet, it holds the console pages' WebSockets and broadcasts "something
 * changed" notices to them. Sockets are accepted with the Hibernation API and keep-alive pings
 * are answered by the runtime (auto-response), so an idle page keeps no object awake: the object
 * runs only to accept a socket and to broadcast a notice.
 */
import { DurableObject } from "cloudflare:workers";
import type { Env } from "../env";
import { broadcast, type FeedNotice, type SocketTag } from "./feed-fanout";

export class ConsoleFeed extends DurableObject<Env> {
  constructor(ctx: DurableObjectState, env: Env) {
    super(ctx, env);
    this.ctx.setWebSocketAutoResponse(new WebSocketRequestResponsePair("ping", "pong"));
  }

  /** A socket from /console/live (already authenticated there); `until` is its session's expiry. */
  async fetch(request: Request): Promise<Response> {
    const { 0: client, 1: server } = new WebSocketPair();
    this.ctx.acceptWebSocket(server);
    server.serializeAttachment({ until: Number(request.headers.get("X-Session-Until")) || 0 } satisfies SocketTag);
    return new Response(null, { status: 101, webSocket: client });
  }

  /** Sends the notice to every open page; returns how many got it. */
  async notify(notice: FeedNotice): Promise<number> {
    return broadcast(this.ctx.getWebSockets(), notice, Date.now());
  }

  async webSocketMessage(ws: WebSocket, message: string | ArrayBuffer) {
    // Pages send only "ping", answered by the auto-response; anything else is ignored.
    void ws;
    void message;
  }

  async webSocketClose(ws: WebSocket, code: number) {
    try {
      ws.close(code === 1005 || code === 1006 ? 1000 : code, "closed");
    } catch {
      // Already closed.
    }
  }
}
