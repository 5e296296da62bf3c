/** The feed's pure part: what a notice is and who gets it. */

/** "Something changed": what kind of thing, which ids. Pages re-fetch what they show. */
export interface FeedNotice {
  kind: string;
  ids: string[];
  at: string;
}

/** Kept on each socket (serializeAttachment), so it survives hibernation. */
export interface SocketTag {
  until: number;
}

/** Close code for a page whose session ended (expired, signed out, its token revoked): the client goes to sign-in. */
export const SESSION_ENDED = 4001;

/** Close code for a page's socket that sent anything but "ping" (RFC 6455 policy violation). */
export const UNEXPECTED_MESSAGE = 1008;

/**
 * The tags a page's socket is accepted with (the Hibernation API's own, so they survive
 * hibernation): its session and its operator token, so that ending either closes exactly its sockets.
 */
export const sessionTag = (idHash: string) => `session:${idHash}`;
export const tokenTag = (tokenId: string) => `token:${tokenId}`;

/** Which sockets to close: a session's (sign-out), or every session's of a token (revocation). */
export type SessionEnd = { session: string } | { token: string };

export const tagOf = (end: SessionEnd) => ("session" in end ? sessionTag(end.session) : tokenTag(end.token));

export function broadcast(sockets: WebSocket[], notice: FeedNotice, now: number) {
  const text = JSON.stringify(notice);
  let sent = 0;
  for (const ws of sockets) {
    try {
      const tag = ws.deserializeAttachment() as SocketTag | null;
      if (tag && tag.until && tag.until <= now) {
        ws.close(SESSION_ENDED, "session expired");
        continue;
      }
      ws.send(text);
      sent++;
    } catch {
      // A socket closing meanwhile: the others still get the notice.
    }
  }
  return sent;
}
