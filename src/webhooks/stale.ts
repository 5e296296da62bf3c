/**
 * server.stale for the fleets' webhooks. Staleness is never written (a server whose stale_at has
 * passed reads as stale, src/servers/staleness.ts), so no owner commits a change to raise it from.
 * Instead the cron reads, through the partial index on stale_at, the servers whose deadline passed
 * since its previous tick — [cursor, now) — and hands each fleet's coordinator its events. The cost
 * follows the servers that went quiet, not the fleet's size. The cursor (D1 `cron_cursors`) moves
 * only once every coordinator took its events, and only when some server crossed (a quiet fleet's
 * tick writes nothing); each event's id is derived from the server and its
 * stale_at, so a repeated tick, or a redelivery, is dropped by the coordinator (which is also what
 * makes reading late-written deadlines again, below, safe).
 */
import { and, asc, eq, gte, lt, ne, or, sql } from "drizzle-orm";
import { getDb } from "../db/client";
import { cronCursors, servers } from "../db/schema";
import type { Env } from "../env";
import { logLine } from "../lib/log";
import { coordinatorOf } from "../objects/stubs";
import type { FleetEvent } from "./events";
import { ownedEvent } from "./outbox";

export const STALE_CURSOR = "stale_events";
/** Servers per tick; more wait for the next (the cursor stops before them). */
export const STALE_PER_TICK = 500;
/** Without a cursor yet (the first sweep ever), deadlines this recent are still news. */
export const STALE_FIRST_LOOKBACK_MS = 2 * 60_000;
/**
 * A deadline may reach the index after it passed (a ledger that learns its host went quiet writes
 * the exact stale_at then, a minute or so late; an outbox retrying D1): rows written in the last
 * RECENT_WRITE_MS whose deadline lies up to LATE_DEADLINE_MS before the cursor are read again.
 * The coordinator drops what it took already.
 */
export const LATE_DEADLINE_MS = 10 * 60_000;
export const RECENT_WRITE_MS = 2 * 60_000;

export async function sendStaleEvents(env: Env, now: number): Promise<{ sent: number }> {
  const db = getDb(env.DB);
  const stored = await db.query.cronCursors.findFirst({ where: eq(cronCursors.name, STALE_CURSOR) });
  const cursor = stored ?? { at: now - STALE_FIRST_LOOKBACK_MS };
  const rows = await db
    .select({ id: servers.id, fleet: servers.fleetId, hostname: servers.hostname, lastSeen: servers.lastSeen, staleAt: servers.staleAt })
    .from(servers)
    // `status != 'stale'` lets SQLite read the partial index servers_stale_at_idx.
    .where(
      and(
        ne(servers.status, "stale"),
        gte(servers.staleAt, cursor.at - LATE_DEADLINE_MS),
        lt(servers.staleAt, now),
        or(gte(servers.staleAt, cursor.at), gte(servers.updatedAt, now - RECENT_WRITE_MS)),
        ne(servers.state, "removed"),
      ),
    )
    .orderBy(asc(servers.staleAt))
    .limit(STALE_PER_TICK);
  const byFleet = new Map<string, FleetEvent[]>();
  for (const r of rows) {
    const staleAt = r.staleAt!;
    const e = ownedEvent(`server.stale:${r.id}:${staleAt}`, r.fleet, "server.stale", `server:${r.id}`,
      `Server ${r.hostname} has not reported since ${r.lastSeen ? new Date(r.lastSeen).toISOString() : "it was registered"}`, {
        server_id: r.id, hostname: r.hostname, last_seen: r.lastSeen ? new Date(r.lastSeen).toISOString() : null, stale_at: new Date(staleAt).toISOString(),
      }, staleAt);
    byFleet.set(r.fleet, [...(byFleet.get(r.fleet) ?? []), e]);
  }
  const results = await Promise.allSettled([...byFleet].map(([fleet, events]) => coordinatorOf(env, fleet).fleetEvents(events)));
  const failed = results.filter((r) => r.status === "rejected");
  if (failed.length) {
    logLine("warn", "server.stale events not taken; the next tick sends them again", { fleets: failed.length, error: String((failed[0] as PromiseRejectedResult).reason) });
    return { sent: 0 };
  }
  // A full page: the next tick starts at its last deadline (ties read again, and dropped as seen).
  const full = rows.length === STALE_PER_TICK;
  const next = full ? Math.max(cursor.at + 1, rows[rows.length - 1].staleAt!) : now;
  // D1 writes only on change: a tick that found no deadline past the cursor leaves it where it is
  // (the next one reads the same empty span of the index, and what crossed since).
  if (!rows.some((r) => r.staleAt! >= cursor.at)) return { sent: rows.length };
  await db
    .insert(cronCursors)
    .values({ name: STALE_CURSOR, at: next })
    .onConflictDoUpdate({ target: cronCursors.name, set: { at: next }, where: sql`${cronCursors.at} = ${cursor.at}` });
  return { sent: rows.length };
}
