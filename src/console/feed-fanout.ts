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

/** Close code for a page whose session expired: the client reloads and lands on sign-in. */
const SESSION_ENDED = 4001;

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
