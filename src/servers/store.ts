import { inVisibleFleets } from "../db/access";
import { and, asc, count, eq, getTableColumns, gte, inArray, lt, ne, sql, type SQL } from "drizzle-orm";
import { unionAll } from "drizzle-orm/sqlite-core";
import type { Db } from "../db/client";
import { serverLabels, servers } from "../db/schema";
import { labelConditions, type LabelTerm } from "../model/server/labels";
import type { ServerView } from "../ledger/view";
import { iso, isoOrNull } from "../lib/time";
import { statusAt, statusIs } from "../model/server/staleness";

export type ServerRow = typeof servers.$inferSelect;

export function serverSummary(row: ServerRow) {
  return {
    id: row.id,
    fleet: row.fleetId,
    hostname: row.hostname,
    kind: row.kind,
    roles: row.roles,
    labels: row.labels,
    reboot_group: row.rebootGroup,
    fleetlock_id: row.fleetlockId,
    state: row.state,
    status: row.status,
    desired_generation: row.desiredGeneration,
    reported_generation: row.reportedGeneration,
    last_seen: isoOrNull(row.lastSeen),
  };
}

/** The authoritative view, straight from the server's ledger. */
export function serverDetail(v: ServerView) {
  const { record: r, report } = v;
  return {
    id: r.id,
    fleet: r.fleet_id,
    hostname: r.hostname,
    kind: r.kind,
    roles: r.roles,
    labels: r.labels ?? {},
    reboot_group: r.reboot_group,
    fleetlock_id: r.fleetlock_id,
    state: r.state,
    status: v.computed.status,
    desired_generation: v.desired.generation,
    reported_generation: report?.generation ?? null,
    last_seen: isoOrNull(report?.received_at),
    created_at: iso(r.created_at),
    desired: v.desired,
    report: report ? { ...report, received_at: iso(report.received_at) } : null,
    agents: v.computed.agents,
    planning: {
      mode: v.plan.mode,
      rev: v.plan.rev,
      ...(v.plan.pinned_at ? { pinned_at: iso(v.plan.pinned_at), pinned_by: v.plan.pinned_by } : {}),
    },
    lifecycle: v.lifecycle
      ? {
          order: v.lifecycle.order,
          generation: v.lifecycle.generation,
          requested_at: iso(v.lifecycle.requested_at),
          requested_by: v.lifecycle.requested_by,
          cleanup_from: isoOrNull(v.lifecycle.cleanup_from),
          forced: v.lifecycle.forced ?? null,
          cleanup_done: v.lifecycle.done,
        }
      : null,
    refresh: v.refresh
      ? {
          requested_at: iso(v.refresh.requested_at),
          requested_by: v.refresh.requested_by,
          answered_at: isoOrNull(v.refresh.answered_at),
        }
      : null,
  };
}

export interface ServerFilter {
  fleet?: string;
  /** The fleets the token may see (null: every fleet). */
  visible?: readonly string[] | null;
  status?: ServerRow["status"];
  state?: ServerRow["state"];
  /** Exact, or a prefix when it ends in `*`. */
  hostname?: string;
  /** Every term must hold. */
  labels?: LabelTerm[];
  /**
   * One of `labels` held by few servers of the fleet (sparseLabel): the page is read from that
   * label's entries (then sorted) rather than by walking the fleet in hostname order.
   */
  driveFrom?: LabelTerm;
}

/** Label entries a term may have for the page to be read from them (and sorted) instead of by hostname. */
const SPARSE_LABEL_ROWS = 200;

/**
 * The term with the fewest servers in the fleet, when it has at most SPARSE_LABEL_ROWS: a page
 * driven from its entries reads at most that many (and as many servers), where a walk in hostname
 * order would read the fleet to find them. A common label (a zone: a quarter of the fleet) is
 * better walked, each server checked by primary key: a page of 20 reads about 80. Each probe reads
 * at most SPARSE_LABEL_ROWS + 1 index entries.
 */
export async function sparseLabel(
  db: Db,
  fleet: string | undefined,
  terms: LabelTerm[] | undefined,
): Promise<LabelTerm | undefined> {
  if (!fleet || !terms?.length) return undefined;
  let best: { term: LabelTerm; n: number } | undefined;
  for (const term of terms) {
    const entries = db
      .select({ one: sql`1` })
      .from(serverLabels)
      .where(
        and(
          eq(serverLabels.fleetId, fleet),
          eq(serverLabels.key, term.key),
          term.value === undefined ? undefined : eq(serverLabels.value, term.value),
        ),
      )
      .limit(SPARSE_LABEL_ROWS + 1)
      .as("entries");
    const [{ n }] = await db.select({ n: count() }).from(entries);
    if (n <= SPARSE_LABEL_ROWS && (!best || n < best.n)) best = { term, n };
  }
  return best?.term;
}

/** Hostnames are lowercase ASCII: every one with the prefix sorts below prefix + this. */
const AFTER_PREFIX = "\u{10FFFF}";

/** Where a page of servers resumes: the last row's natural sort key, hostname and id. */
export type ServerPageKey = [hostnameSort: string, hostname: string, id: string];

/** A page of the index in natural hostname order (sim-2 before sim-10), after the key `after`. */
export function listServers(
  db: Db,
  filter: ServerFilter,
  after: ServerPageKey | null,
  limit: number,
  now = Date.now(),
) {
  const conds: SQL[] = [];
  // Removed servers are tombstones: listed only when asked for by state.
  conds.push(filter.state ? eq(servers.state, filter.state) : ne(servers.state, "removed"));
  const visible = inVisibleFleets(servers.fleetId, filter.visible ?? null);
  if (visible) conds.push(visible);
  if (filter.hostname) {
    const name = filter.hostname.toLowerCase();
    // A prefix as a range, so it reads the hostname indexes rather than every row (LIKE would not).
    if (name.endsWith("*"))
      conds.push(gte(servers.hostname, name.slice(0, -1)), lt(servers.hostname, name.slice(0, -1) + AFTER_PREFIX));
    else conds.push(eq(servers.hostname, name));
  }
  const drive = filter.fleet && filter.status !== "stale" ? filter.driveFrom : undefined;
  conds.push(
    ...labelConditions(
      filter.labels?.filter((t) => t !== drive),
      servers.id,
    ),
  );
  if (after)
    conds.push(
      sql`(${servers.hostnameSort}, ${servers.hostname}, ${servers.id}) > (${after[0]}, ${after[1]}, ${after[2]})`,
    );
  const columns = { ...getTableColumns(servers), status: statusAt(now) };
  const ordered = [asc(servers.hostnameSort), asc(servers.hostname), asc(servers.id)];
  const inFleet = filter.fleet ? eq(servers.fleetId, filter.fleet) : undefined;
  if (filter.status !== "stale") {
    // Staleness is read from stale_at, never stored by the cron (./staleness.ts).
    const status = filter.status ? statusIs(filter.status, now) : undefined;
    if (drive) {
      // CROSS JOIN: SQLite keeps the label's entries as the outer loop (server_labels_fleet_key_value_idx).
      return db
        .select(columns)
        .from(serverLabels)
        .crossJoin(servers)
        .where(
          and(
            eq(serverLabels.fleetId, filter.fleet!),
            eq(serverLabels.key, drive.key),
            drive.value === undefined ? undefined : eq(serverLabels.value, drive.value),
            eq(servers.id, serverLabels.serverId),
            status,
            ...conds,
          ),
        )
        .orderBy(...ordered)
        .limit(limit + 1);
    }
    // With a status: servers_fleet_status_sort_idx holds the page in order, so it reads its own rows.
    return db
      .select(columns)
      .from(servers)
      .where(and(inFleet, status, ...conds))
      .orderBy(...ordered)
      .limit(limit + 1);
  }
  // Stale is either of two sets (./staleness.ts), each read through its own index: rows an older
  // cron marked stale (in natural order from servers_fleet_status_sort_idx), and rows whose
  // deadline passed (from the partial servers_stale_at_idx, whose condition is written as literal
  // text so SQLite can match it; `+` keeps SQLite off the fleet's indexes, which would read every
  // server of the fleet to find the few stale ones). The page
  // reads the stale servers, never the fleet.
  const marked = db
    .select(columns)
    .from(servers)
    .where(and(inFleet, eq(servers.status, "stale"), ...conds));
  const passed = db
    .select(columns)
    .from(servers)
    .where(
      and(
        filter.fleet ? sql`+${servers.fleetId} = ${filter.fleet}` : undefined,
        sql`${servers.status} != 'stale'`,
        lt(servers.staleAt, now),
        ...conds,
      ),
    );
  return unionAll(marked, passed)
    .orderBy(...ordered)
    .limit(limit + 1);
}

/** The hostnames of these servers, in one query whatever their number: the ids go as one JSON parameter. */
export const hostnamesIn = (db: Db, ids: readonly string[]) =>
  db
    .select({ id: servers.id, hostname: servers.hostname })
    .from(servers)
    .where(inArray(servers.id, sql`(SELECT value FROM json_each(${JSON.stringify(ids)}))`));
