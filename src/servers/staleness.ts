import { and, lt, sql } from "drizzle-orm";
import type { Db } from "../db/client";
import { servers } from "../db/schema";
import { staleCounters } from "../metrics/service";

/**
 * Marks servers that stopped reporting: one statement whatever the number of fleets, reading only
 * rows whose deadline (stale_at = last_seen + the fleet's stale_after, kept by each ledger's
 * projection) has passed and which are not stale yet, through a partial index. Already-stale
 * servers leave that index, so a tick costs what newly crossed, not the fleet's size. The next
 * report from a stale server rewrites its status.
 */
export async function markStale(db: Db, now: number) {
  const res = await db
    .update(servers)
    .set({ status: "stale", updatedAt: now })
    // The literal term is the partial index's own WHERE, so SQLite can use the index.
    .where(and(sql`${servers.status} != 'stale'`, lt(servers.staleAt, now)));
  const marked = res.meta.changes ?? 0;
  staleCounters.ticks++;
  staleCounters.rowsRead += res.meta.rows_read ?? 0;
  staleCounters.marked += marked;
  return marked;
}
