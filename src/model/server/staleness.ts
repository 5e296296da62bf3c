import { and, eq, sql, type SQL } from "drizzle-orm";
import { servers } from "../../db/schema";
import type { ServerStatus } from "../../domain/enums";

/**
 * Staleness is read, never written: a server is stale once its deadline has passed (stale_at =
 * last_seen + the fleet's stale_after, kept by its ledger's projection, which is the only writer
 * of the server row). The cron marks nothing, so a tick costs no statement however many servers
 * fall silent, and the index agrees with the ledger's own view (stale when now > stale_at).
 *
 * Rows an older release's cron marked `stale` count as stale until their server reports again
 * (their deadline had passed, and only the next projection moves it). Written as two terms, one
 * per index (servers_status_idx, and the partial servers_stale_at_idx on rows not so marked), so a
 * fleet-wide read of the stale servers never scans the servers table.
 */
export const isStale = (now: number): SQL =>
  sql`(${servers.status} = 'stale' OR (${servers.status} != 'stale' AND ${servers.staleAt} < ${now}))`;

const notStale = (now: number): SQL => sql`(${servers.staleAt} IS NULL OR ${servers.staleAt} >= ${now})`;

/** The status column as read at `now`. */
export const statusAt = (now: number) =>
  sql<ServerStatus>`CASE WHEN ${servers.staleAt} < ${now} THEN 'stale' ELSE ${servers.status} END`;

/** Servers whose status is `status` at `now`. */
export const statusIs = (status: ServerStatus, now: number): SQL =>
  status === "stale" ? isStale(now) : and(eq(servers.status, status), notStale(now))!;
