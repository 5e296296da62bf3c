/**
 * The console's live channel: pages connect to their fleet's ConsoleFeed at /console/live. The
 * notices it broadcasts are raised by the owners where a change is committed (./notices.ts).
 */
import { Hono } from "hono";
import type { Env } from "../env";
import { fleetAllowed } from "../domain/principal";
import { sameOrigin, type ConsoleEnv } from "./guard";
import { currentSession } from "./session";

const FLEET = /^[a-z0-9][a-z0-9-]{0,62}$/;
const feedOf = (env: Env, fleet: string) => env.FEED.get(env.FEED.idFromName(fleet));

/** The page's socket: this origin, a live session; then the fleet's feed takes it. */
export const liveRoutes = new Hono<ConsoleEnv>().get("/console/live", async (c) => {
  if (c.req.header("Upgrade")?.toLowerCase() !== "websocket") return c.text("this endpoint takes a WebSocket", 426);
  if (!sameOrigin(c)) return c.text("Refused: the socket was not opened by this console (Origin).", 403);
  const session = await currentSession(c);
  if (!session) return c.text("Sign in first.", 401);
  const fleet = c.req.query("fleet") ?? "";
  if (!FLEET.test(fleet)) return c.text("name a fleet: ?fleet=", 400);
  // Decided by the session's own list, whether the fleet exists or not: nothing is confirmed.
  if (!fleetAllowed({ kind: "operator", fleets: session.fleets }, fleet)) return c.text("no such fleet", 404);
  const headers = new Headers(c.req.raw.headers);
  headers.set("X-Session-Until", String(session.expiresAt));
  headers.set("X-Session-Id", session.idHash);
  headers.set("X-Session-Token", session.tokenId);
  const res = await feedOf(c.env, fleet).fetch(new Request(c.req.url, { headers }));
  // A fresh Response: one from another object has immutable headers, and middleware adds some.
  return new Response(null, { status: res.status, webSocket: res.webSocket, headers: res.headers });
});
