/**
 * A fleet's servers counted by state and status: the one aggregate behind the console's overview
 * (GET /v1/fleets/{fleet}/summary) and `hm status` (GET /v1/status), so the two can never count
 * differently. One GROUP BY over servers_fleet_state_status_idx, which covers every column it
 * reads (fleet, state, status and stale_at, from which stale is derived at `now`): one index entry
 * per server of the fleet and no table row, in one statement whatever the fleet's size.
 */
import { eq, sql } from "drizzle-orm";
import type { Db } from "../db/client";
import { servers } from "../db/schema";
import { SERVER_STATES, SERVER_STATUSES, type ServerState, type ServerStatus } from "../domain/enums";
import { statusAt } from "../model/server/staleness";

/** Every key at zero, so a count is there even when nothing has it. */
export const zeros = <T extends readonly string[]>(keys: T) =>
  Object.fromEntries(keys.map((k) => [k, 0])) as Record<T[number], number>;

export interface ServerCounts {
  /** Every server but removed ones (tombstones). */
  total: number;
  /** Removed servers excluded. */
  by_status: Record<ServerStatus, number>;
  /** Removed servers included, under `removed`. */
  by_state: Record<ServerState, number>;
}

export async function fleetServerCounts(db: Db, fleet: string, now = Date.now()): Promise<ServerCounts> {
  const rows = await db
    .select({ state: servers.state, status: statusAt(now), n: sql<number>`count(*)` })
    .from(servers)
    .where(eq(servers.fleetId, fleet))
    .groupBy(servers.state, statusAt(now));
  const counts: ServerCounts = { total: 0, by_status: zeros(SERVER_STATUSES), by_state: zeros(SERVER_STATES) };
  for (const c of rows) {
    const n = Number(c.n);
    counts.by_state[c.state] += n;
    if (c.state === "removed") continue;
    counts.by_status[c.status] += n;
    counts.total += n;
  }
  return counts;
}
