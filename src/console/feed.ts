/**
 * The console's live channel. Changes reach a fleet's ConsoleFeed through ONE function,
 * notifyFeed(env, fleet, notice); pages connect to it at /console/live.
 *
 * For now notices are raised at the edge, after each successful mutating API request
 * (`liveNotices`, mounted once in app.ts): reports, FleetLock grants and releases, operator
 * actions. The owners' outboxes are where they belong (see docs/console.md, "Live updates"); a
 * change an object makes on its own (a timer) is seen by pages at the next notice of its fleet.
 */
import { eq } from "drizzle-orm";
import { Hono } from "hono";
import { createMiddleware } from "hono/factory";
import type { Context } from "hono";
import { getDb } from "../db/client";
import { servers } from "../db/schema";
import type { Env } from "../env";
import { sameOrigin, type ConsoleEnv } from "./guard";
import type { FeedNotice } from "./feed-fanout";
import { currentSession } from "./session";

const FLEET = /^[a-z0-9][a-z0-9-]{0,62}$/;
const feedOf = (env: Env, fleet: string) => env.FEED.get(env.FEED.idFromName(fleet));

/**
 * At most one notice per fleet per THROTTLE_MS from an isolate: one arriving sooner waits for the
 * window's end and goes then, standing for every change in between (pages re-fetch everything
 * they show). So a busy fleet costs its feed a couple of calls a second per isolate, however many
 * reports arrive, and the last change of a burst is never left untold.
 */
const THROTTLE_MS = 500;
const windows = new Map<string, { last: number; trailing: boolean }>();

export async function notifyFeed(env: Env, fleet: string, notice: { kind: string; ids?: string[] }) {
  let w = windows.get(fleet);
  if (!w) {
    if (windows.size > 4096) windows.clear();
    windows.set(fleet, (w = { last: 0, trailing: false }));
  }
  const wait = w.last + THROTTLE_MS - Date.now();
  if (wait > 0) {
    if (w.trailing) return;
    w.trailing = true;
    await new Promise((r) => setTimeout(r, wait));
    w.trailing = false;
  }
  w.last = Date.now();
  const body: FeedNotice = { kind: notice.kind, ids: (notice.ids ?? []).slice(0, 20), at: new Date(w.last).toISOString() };
  await feedOf(env, fleet).notify(body);
}

/** A server never changes fleet, so its fleet is looked up once per isolate. */
const fleetOfServerCache = new Map<string, string>();
async function fleetOfServer(env: Env, id: string) {
  const known = fleetOfServerCache.get(id);
  if (known) return known;
  const row = await getDb(env.DB).query.servers.findFirst({ where: eq(servers.id, id), columns: { fleetId: true } });
  if (!row) return undefined;
  if (fleetOfServerCache.size > 10_000) fleetOfServerCache.clear();
  fleetOfServerCache.set(id, row.fleetId);
  return row.fleetId;
}

const KIND: Record<string, string> = { agent: "report", fleetlock: "reboot", servers: "server", rollouts: "rollout", check: "drift", fleets: "fleet" };

type Json = Record<string, unknown> | null;

async function jsonOf(headers: Headers, read: () => Promise<unknown>): Promise<Json> {
  if (!(headers.get("Content-Type") ?? "").includes("json")) return null;
  try {
    const value = await read();
    return value && typeof value === "object" ? (value as Json) : null;
  } catch {
    return null;
  }
}

/** What changed, and in which fleet, from a successful mutating request and its answer. */
async function noticeOf(c: Context<{ Bindings: Env }>) {
  const seg = c.req.path.split("/").filter(Boolean);
  const top = seg[0] === "fleetlock" ? "fleetlock" : seg[1];
  let kind = KIND[top] ?? top;
  let fleet: unknown;
  let ids: string[] = [];
  if (top === "fleetlock") fleet = seg[1];
  else if (top === "fleets" && seg[2]) {
    fleet = seg[2];
    if (seg[3] === "reboot-groups") kind = "reboot";
    ids = seg.slice(4, 5);
  } else if ((top === "servers" || top === "rollouts") && seg[2]) ids = [seg[2]];
  const answer = await jsonOf(c.res.headers, () => c.res.clone().json());
  // The request's JSON was parsed by its route's validator; hono keeps it, so this reads no stream.
  fleet ??= answer?.fleet ?? (await jsonOf(c.req.raw.headers, () => c.req.json()))?.fleet;
  const serverId = typeof answer?.server_id === "string" ? answer.server_id : top === "servers" ? seg[2] : undefined;
  if (serverId && !ids.length) ids = [serverId];
  if (typeof fleet !== "string" && serverId) fleet = await fleetOfServer(c.env, serverId);
  return typeof fleet === "string" && FLEET.test(fleet) ? { fleet, kind, ids } : null;
}

/** Mounted once on the app: every successful mutating API or FleetLock request tells its fleet's feed. */
export const liveNotices = createMiddleware<{ Bindings: Env }>(async (c, next) => {
  await next();
  const m = c.req.method;
  if (m === "GET" || m === "HEAD" || m === "OPTIONS" || c.res.status >= 300) return;
  if (!c.req.path.startsWith("/v1/") && !c.req.path.startsWith("/fleetlock/")) return;
  const work = noticeOf(c)
    .then((n) => n && notifyFeed(c.env, n.fleet, n))
    .catch(() => undefined);
  try {
    c.executionCtx.waitUntil(work);
  } catch {
    await work;
  }
});

/** The page's socket: this origin, a live session; then the fleet's feed takes it. */
export const liveRoutes = new Hono<ConsoleEnv>().get("/console/live", async (c) => {
  if (c.req.header("Upgrade")?.toLowerCase() !== "websocket") return c.text("this endpoint takes a WebSocket", 426);
  if (!sameOrigin(c)) return c.text("Refused: the socket was not opened by this console (Origin).", 403);
  const session = await currentSession(c);
  if (!session) return c.text("Sign in first.", 401);
  const fleet = c.req.query("fleet") ?? "";
  if (!FLEET.test(fleet)) return c.text("name a fleet: ?fleet=", 400);
  const headers = new Headers(c.req.raw.headers);
  headers.set("X-Session-Until", String(session.expiresAt));
  const res = await feedOf(c.env, fleet).fetch(new Request(c.req.url, { headers }));
  // A fresh Response: one from another object has immutable headers, and middleware adds some.
  return new Response(null, { status: res.status, webSocket: res.webSocket, headers: res.headers });
});
