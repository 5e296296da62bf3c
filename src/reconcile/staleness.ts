import { and, eq, lt, ne, notInArray } from "drizzle-orm";
import type { Db } from "../db/client";
import { fleets, servers } from "../db/schema";

/**
 * Marks servers that stopped reporting. Ledgers refresh last_seen well within stale-after, so
 * only silent servers match; the next report from one rewrites its status.
 */
export async function markStale(db: Db, now: number) {
  const all = await db.select({ id: fleets.id, staleAfterS: fleets.staleAfterS }).from(fleets);
  let marked = 0;
  for (const f of all) {
    const res = await db
      .update(servers)
      .set({ status: "stale", updatedAt: now })
      .where(
        and(
          eq(servers.fleetId, f.id),
          lt(servers.lastSeen, now - f.staleAfterS * 1000),
          notInArray(servers.status, ["stale", "unknown"]),
          ne(servers.state, "removed"),
        ),
      );
    marked += res.meta.changes ?? 0;
  }
  return marked;
}
