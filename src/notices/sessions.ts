/**
 * Ending a session reaches the live pages it holds: every fleet's feed closes the sockets tagged
 * with it. Here rather than in the console so that token revocation (src/auth/) reaches the feeds
 * without importing the console's pages.
 */
import { getDb } from "../db/client";
import { fleets } from "../db/schema";
import type { FleetAccess } from "../domain/principal";
import type { Env } from "../env";
import type { SessionEnd } from "./feed-fanout";

/** Fleets' feeds told at once when a session ends. */
const FEEDS_AT_ONCE = 16;

/**
 * Closes the live sockets of a session (signed out) or of every session of a token (revoked) at
 * once, on the feeds of the fleets the token may see (`fleets`: a page's socket is refused on any
 * other's): a socket is tagged with both (./feed-object.ts), so each feed closes exactly those,
 * and one that holds none answers without touching a socket.
 * A session ends rarely; a feed that cannot be reached is logged, and the pages it holds are
 * refused at their next request (the session row is gone) or on their session's expiry.
 */
export async function closeLiveSockets(
  env: Env,
  end: SessionEnd,
  reason: string,
  visible: FleetAccess,
): Promise<number> {
  const ids = visible === "*" ? (await getDb(env.DB).select({ id: fleets.id }).from(fleets)).map((r) => r.id) : visible;
  let closed = 0;
  for (let i = 0; i < ids.length; i += FEEDS_AT_ONCE) {
    const results = await Promise.allSettled(
      ids.slice(i, i + FEEDS_AT_ONCE).map((id) => env.FEED.get(env.FEED.idFromName(id)).endSessions(end, reason)),
    );
    for (const r of results) {
      if (r.status === "fulfilled") closed += r.value;
      else
        console.warn(
          JSON.stringify({ msg: "a console feed could not close an ended session's sockets", error: String(r.reason) }),
        );
    }
  }
  return closed;
}
