/**
 * An object's hibernatable WebSockets (the Hibernation API): accepted with `ctx.acceptWebSocket`,
 * so the object can be evicted from memory between messages while its sockets stay connected and
 * are billed nothing. What a socket must remember across an eviction lives in its attachment (in
 * memory next to the connection, not in storage) and in its tags.
 *
 * The room is the object's view of its sockets; the helpers never throw on a socket that closed
 * meanwhile (a peer can go at any moment, and a send to it is then simply lost).
 */

export interface SocketRoom {
  /** Accepts a new socket with its tags and attachment; `response` (101) hands its peer to the caller. */
  accept(
    tags: string[],
    attachment: unknown,
    headers?: Record<string, string>,
  ): { socket: WebSocket; response: Response };
  /** The open sockets with this tag (after an eviction too). */
  list(tag: string): WebSocket[];
  tags(ws: WebSocket): string[];
}

export function socketRoom(ctx: DurableObjectState): SocketRoom {
  return {
    accept(tags, attachment, headers) {
      const [client, server] = Object.values(new WebSocketPair());
      ctx.acceptWebSocket(server, tags);
      server.serializeAttachment(attachment);
      return { socket: server, response: new Response(null, { status: 101, webSocket: client, headers }) };
    },
    list: (tag) => ctx.getWebSockets(tag),
    tags: (ws) => {
      try {
        return ctx.getTags(ws);
      } catch {
        // A socket this object closed itself is no longer its to tag (its close event still comes).
        return [];
      }
    },
  };
}

export const attachmentOf = <T>(ws: WebSocket) => ws.deserializeAttachment() as T;

export function setAttachment<T>(ws: WebSocket, value: T) {
  ws.serializeAttachment(value);
}

/** Sends a JSON message; false when the socket is no longer open. */
export function sendJson(ws: WebSocket, message: unknown): boolean {
  try {
    ws.send(JSON.stringify(message));
    return true;
  } catch {
    return false;
  }
}

export function closeSocket(ws: WebSocket, code: number, reason: string) {
  try {
    ws.close(code, reason);
  } catch {
    // already closed
  }
}

/**
 * Answers a peer's close frame (from `webSocketClose`/`webSocketError`): the close handshake ends
 * only once this side has sent its own, and until then the runtime keeps the connection. 1005 and
 * 1006 (no code, no frame) may not be sent, so those are answered 1000. A no-op on a socket this
 * side closed first.
 */
export function answerClose(ws: WebSocket, code: number, reason: string) {
  const sendable = code >= 1000 && code < 5000 && ![1004, 1005, 1006, 1015].includes(code);
  closeSocket(ws, sendable ? code : 1000, sendable ? reason : "");
}

/** Whether a message as received is over `maxBytes` (a string counted in UTF-8). */
export function overBytes(message: string | ArrayBuffer, maxBytes: number): boolean {
  if (typeof message !== "string") return message.byteLength > maxBytes;
  // A UTF-16 code unit is 1 to 3 bytes in UTF-8: encode only when the length cannot decide.
  if (message.length > maxBytes) return true;
  if (message.length * 3 <= maxBytes) return false;
  return new TextEncoder().encode(message).byteLength > maxBytes;
}
