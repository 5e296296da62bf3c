/**
 * GET /v1/status: what `hm status` shows, in one request (docs/operator-guide.md) — per fleet, its servers
 * counted by status and state on the server side (never paged through by a client), the ones
 * that need a look (failed, stale, drifted: a count and the first few by hostname, so a cap says
 * "and N more"), its reboot groups with holders, its rollouts in progress; and the data version.
 * Each fleet costs one D1 batch and one coordinator call, whatever its size.
 */
import { getDb, type Db } from "../db/client";
import type { ServerStatus } from "../domain/enums";
import { notFound } from "../domain/errors";
import type { Env } from "../env";
import { listGroups } from "../fleetlock/service";
import { fleetView, getFleet, listFleets } from "../fleets/store";
import { activeRollouts } from "../rollouts/service";
import { upgradeStatus } from "../upgrades/service";
import { isoOrNull } from "../lib/time";
import { fleetServerCounts } from "./counts";
import { listServers } from "../servers/store";

/** The statuses that need a look, in the order they are shown. */
const ATTENTION: ServerStatus[] = ["failed", "stale", "drifted"];
/** Fleets one answer covers (the rest are counted). */
const STATUS_FLEETS = 50;

export async function statusOf(
  env: Env,
  opts: { fleet?: string; attention: number; visible: readonly string[] | null },
) {
  const db = getDb(env.DB);
  let fleets: string[];
  let more = 0;
  if (opts.fleet) {
    const hidden = opts.visible !== null && !opts.visible.includes(opts.fleet);
    if (hidden || !(await getFleet(db, opts.fleet))) throw notFound("fleet", opts.fleet);
    fleets = [opts.fleet];
  } else {
    const rows = await listFleets(db, opts.visible, null, STATUS_FLEETS);
    fleets = rows.slice(0, STATUS_FLEETS).map((f) => f.id);
    more = rows.length > STATUS_FLEETS ? 1 : 0;
  }
  const [upgrades, perFleet] = await Promise.all([
    upgradeStatus(env, null, 1),
    Promise.all(fleets.map((f) => fleetStatus(env, db, f, opts.attention))),
  ]);
  return {
    data: { state: upgrades.state, data_version: upgrades.data_version, newest_version: upgrades.newest_version },
    fleets: perFleet,
    more_fleets: more > 0,
  };
}

const present = (counts: Record<string, number>, except?: string) =>
  Object.fromEntries(Object.entries(counts).filter(([k, n]) => n > 0 && k !== except));

async function fleetStatus(env: Env, db: Db, fleet: string, attention: number) {
  const now = Date.now();
  const [counts, lists, groups, rollouts] = await Promise.all([
    fleetServerCounts(db, fleet, now),
    Promise.all(ATTENTION.map((status) => listServers(db, { fleet, status }, null, attention, now))),
    listGroups(env, fleet).then((g) => g.items),
    activeRollouts(env, fleet),
  ]);
  // The overview's counts, shown as hm status always has: only what is there, removed servers left out.
  const { total } = counts;
  const by_status = present(counts.by_status);
  const by_state = present(counts.by_state, "removed");
  return {
    id: fleet,
    servers: { total, by_status, by_state },
    attention: ATTENTION.map((status, i) => ({
      status,
      count: by_status[status] ?? 0,
      items: lists[i]
        .slice(0, attention)
        .map((s) => ({ id: s.id, hostname: s.hostname, status: s.status, last_seen: isoOrNull(s.lastSeen) })),
    })),
    reboot_groups: groups.map((g) => ({
      name: g.name,
      slots: g.slots,
      held: g.holders.length,
      paused: g.paused,
      open_now: g.open_now,
      queued: g.queue.length,
      holders: g.holders.map((h) => ({
        id: h.id,
        hostname: h.server?.hostname ?? null,
        since: h.granted_at,
        stuck: h.stuck,
      })),
    })),
    rollouts,
  };
}

/** Fleets one page of GET /v1/status/fleets covers at most: each costs a D1 batch and a coordinator call. */
export const FLEET_HEALTH_PAGE = 50;

/**
 * A page of fleets in id order (the fleets list's cursor), each with its settings and its health
 * counted on the server, so `hm fleets` shows every fleet of a page in one request.
 */
export async function fleetsHealth(env: Env, visible: readonly string[] | null, after: string | null, limit: number) {
  const db = getDb(env.DB);
  const rows = await listFleets(db, visible, after, limit);
  const items = await Promise.all(
    rows.slice(0, limit).map(async (row) => {
      const st = await fleetStatus(env, db, row.id, 0);
      const needsLook = ATTENTION.reduce((n, status) => n + (st.servers.by_status[status] ?? 0), 0);
      const stuck = st.reboot_groups.reduce((n, g) => n + g.holders.filter((h) => h.stuck).length, 0);
      return {
        ...fleetView(row),
        servers: { total: st.servers.total, by_status: st.servers.by_status },
        needs_look: needsLook,
        stuck_reboots: stuck,
        rollouts_running: st.rollouts.length,
        health: fleetHealth(st.servers.total, needsLook, stuck),
      };
    }),
  );
  return { items, more: rows.length > limit };
}

/** A fleet's health in one word, as `hm fleets` and the console's fleets page read it. */
function fleetHealth(total: number, needsLook: number, stuckReboots: number) {
  if (total === 0) return "empty" as const;
  return needsLook > 0 || stuckReboots > 0 ? ("needs_look" as const) : ("ok" as const);
}
