/**
 * server.stale for the fleets' webhooks. Staleness is never written (a server whose stale_at has
 * passed reads as stale, src/model/server/staleness.ts), so no owner commits a change to raise it from.
 * Instead the cron reads, through the partial index on stale_at, the servers whose deadline passed
 * since its previous tick — [cursor, now) — and hands each fleet's coordinator its events. The cost
 * follows the servers that went quiet, not the fleet's size. The cursor (D1 `cron_cursors`) moves
 * only when some server crossed (a quiet fleet's tick writes nothing). A coordinator that cannot
 * take its events is owed them as a `stale_events` fleet task, written in the cursor's batch and
 * retried by the cron (src/fleets/tasks.ts), so it neither loses them nor holds up the other
 * fleets' (a cursor held for it would reread the same page every tick). Each event's id is derived
 * from the server and its stale_at, so a repeated tick, or a redelivery, is dropped by the
 * coordinator (which is also what makes reading late-written deadlines again, below, safe).
 */
import { and, asc, eq, gte, inArray, lt, ne, sql } from "drizzle-orm";
import type { BatchItem } from "drizzle-orm/batch";
import { getDb } from "../db/client";
import { cronCursors, servers } from "../db/schema";
import type { Env } from "../env";
import { logLine } from "../lib/log";
import { owedEvents } from "../fleets/store";
import { coordinatorOf } from "../objects/stubs";
import type { FleetEvent } from "./events";
import { ownedEvent } from "./outbox";

export const STALE_CURSOR = "stale_events";
/** Servers per tick; more wait for the next (the cursor stops before them). */
export const STALE_PER_TICK = 500;
/** Without a cursor yet (the first sweep ever), deadlines this recent are still news. */
const STALE_FIRST_LOOKBACK_MS = 2 * 60_000;
/**
 * A deadline may reach the index after it passed (a ledger that learns its host went quiet writes
 * the exact stale_at then, up to a few minutes late; an outbox retrying D1): rows written in the
 * last RECENT_WRITE_MS whose deadline lies up to LATE_DEADLINE_MS before the cursor are read again,
 * in the order they were written. The coordinator drops what it took already.
 */
export const LATE_DEADLINE_MS = 10 * 60_000;
export const RECENT_WRITE_MS = 2 * 60_000;
/**
 * A burst of late rows (a network cut that silences hundreds of hosts at once) fills more than a
 * page: where the late read got to, by updated_at, so the rest is read next tick instead of aging
 * out of the RECENT_WRITE_MS window. Kept only while such a burst is being caught up.
 */
const LATE_CURSOR = "stale_events_late";

const columns = {
  id: servers.id,
  fleet: servers.fleetId,
  hostname: servers.hostname,
  lastSeen: servers.lastSeen,
  staleAt: servers.staleAt,
  updatedAt: servers.updatedAt,
};

export async function sendStaleEvents(env: Env, now: number): Promise<{ sent: number }> {
  const db = getDb(env.DB);
  const cursors = await db
    .select()
    .from(cronCursors)
    .where(inArray(cronCursors.name, [STALE_CURSOR, LATE_CURSOR]));
  const cursor = cursors.find((c) => c.name === STALE_CURSOR) ?? { at: now - STALE_FIRST_LOOKBACK_MS };
  const lateCursor = cursors.find((c) => c.name === LATE_CURSOR);
  const lateFrom = Math.min(lateCursor?.at ?? Infinity, now - RECENT_WRITE_MS);
  // `status != 'stale'` lets SQLite read the partial index servers_stale_at_idx (both reads).
  const live = and(ne(servers.status, "stale"), ne(servers.state, "removed"));
  const [onTime, late] = await db.batch([
    db
      .select(columns)
      .from(servers)
      .where(and(live, gte(servers.staleAt, cursor.at), lt(servers.staleAt, now)))
      .orderBy(asc(servers.staleAt))
      .limit(STALE_PER_TICK),
    db
      .select(columns)
      .from(servers)
      .where(
        and(
          live,
          gte(servers.staleAt, cursor.at - LATE_DEADLINE_MS),
          lt(servers.staleAt, Math.min(cursor.at, now)),
          gte(servers.updatedAt, lateFrom),
        ),
      )
      .orderBy(asc(servers.updatedAt))
      .limit(STALE_PER_TICK),
  ]);
  const rows = [...onTime, ...late];
  const byFleet = new Map<string, FleetEvent[]>();
  for (const r of rows) {
    const staleAt = r.staleAt!;
    const e = ownedEvent(
      `server.stale:${r.id}:${staleAt}`,
      r.fleet,
      "server.stale",
      `server:${r.id}`,
      `Server ${r.hostname} has not reported since ${r.lastSeen ? new Date(r.lastSeen).toISOString() : "it was registered"}`,
      {
        server_id: r.id,
        hostname: r.hostname,
        last_seen: r.lastSeen ? new Date(r.lastSeen).toISOString() : null,
        stale_at: new Date(staleAt).toISOString(),
      },
      staleAt,
    );
    byFleet.set(r.fleet, [...(byFleet.get(r.fleet) ?? []), e]);
  }
  const fleets = [...byFleet];
  const results = await Promise.allSettled(
    fleets.map(([fleet, events]) => coordinatorOf(env, fleet).fleetEvents(events)),
  );
  const failed = fleets.filter((_, i) => results[i].status === "rejected");
  const writes: BatchItem<"sqlite">[] = failed.map(([fleet, events]) => owedEvents(db, fleet, events, now));
  if (failed.length) {
    const error = String((results.find((r) => r.status === "rejected") as PromiseRejectedResult).reason);
    logLine("warn", "server.stale events not taken; owed to those fleets as tasks the cron retries", {
      fleets: failed.length,
      error,
    });
  }
  // A full page: the next tick starts at its last deadline (ties read again, and dropped as seen).
  // D1 writes only on change: a tick that found no deadline past the cursor leaves it where it is
  // (the next one reads the same empty span of the index, and what crossed since).
  if (onTime.length) {
    const next = onTime.length === STALE_PER_TICK ? Math.max(cursor.at + 1, onTime[onTime.length - 1].staleAt!) : now;
    writes.push(
      db
        .insert(cronCursors)
        .values({ name: STALE_CURSOR, at: next })
        .onConflictDoUpdate({
          target: cronCursors.name,
          set: { at: next },
          where: sql`${cronCursors.at} = ${cursor.at}`,
        }),
    );
  }
  // The late read's cursor: after a full page, its last write (ties read again); once a page is
  // not full, the burst is caught up and the window alone does again.
  const lateStill = sql`${cronCursors.at} = ${lateCursor?.at ?? null}`;
  if (late.length === STALE_PER_TICK) {
    const next = Math.max(lateCursor?.at ?? 0, lateFrom + 1, late[late.length - 1].updatedAt);
    writes.push(
      db
        .insert(cronCursors)
        .values({ name: LATE_CURSOR, at: next })
        .onConflictDoUpdate({ target: cronCursors.name, set: { at: next }, where: lateStill }),
    );
  } else if (lateCursor) {
    writes.push(db.delete(cronCursors).where(and(eq(cronCursors.name, LATE_CURSOR), lateStill)));
  }
  if (writes.length) await db.batch(writes as [BatchItem<"sqlite">, ...BatchItem<"sqlite">[]]);
  return { sent: rows.length };
}
