/**
 * A fleet at a glance, for the operator console's overview (issue 20): counts from D1 aggregates
 * over indexes (never by paging through servers), the reboot groups from the fleet's coordinator
 * and the data version. A constant number of statements whatever the fleet's size.
 */
import { and, desc, eq, inArray, sql } from "drizzle-orm";
import { getDb } from "../db/client";
import { rollouts, servers } from "../db/schema";
import { ROLLOUT_TARGET_STATES, SERVER_STATES, SERVER_STATUSES } from "../domain/enums";
import type { Env } from "../env";
import { notFound } from "../domain/errors";
import { iso } from "../lib/time";
import { statusAt } from "../servers/staleness";
import { coordinatorOf } from "../objects/stubs";
import { readUpgradeState } from "../upgrades/state";
import { NEWEST_VERSION, UPGRADE_STEPS } from "../upgrades/steps";
import { fleetSettings, getFleet } from "./store";
import type { FleetSummary } from "./summary.schemas";

const zeros = <T extends readonly string[]>(keys: T) => Object.fromEntries(keys.map((k) => [k, 0])) as Record<T[number], number>;
/** The rollout states in which a rollout still moves (the partial index rollouts_active_idx). */
const MOVING = ["running", "paused", "rolling_back"] as const;

export async function fleetSummary(env: Env, fleet: string): Promise<FleetSummary> {
  const db = getDb(env.DB);
  const now = Date.now();
  const row = await getFleet(db, fleet);
  if (!row) throw notFound("fleet", fleet);
  const [counts, moving, upgrade, groups] = await Promise.all([
    // One aggregate, read from servers_fleet_state_status_idx alone; stale is derived from stale_at.
    db
      .select({ state: servers.state, status: statusAt(now), n: sql<number>`count(*)` })
      .from(servers)
      .where(eq(servers.fleetId, fleet))
      .groupBy(servers.state, statusAt(now)),
    // The literal IN list is the partial index's own WHERE, so SQLite reads only moving rollouts.
    db
      .select()
      .from(rollouts)
      .where(and(inArray(rollouts.state, [...MOVING]), eq(rollouts.fleetId, fleet)))
      .orderBy(desc(rollouts.createdAt)),
    readUpgradeState(db),
    coordinatorOf(env, fleet).listGroups(fleetSettings(row)),
  ]);
  const byStatus = zeros(SERVER_STATUSES);
  const byState = zeros(SERVER_STATES);
  let total = 0;
  for (const c of counts) {
    byState[c.state] += c.n;
    if (c.state === "removed") continue;
    byStatus[c.status] += c.n;
    total += c.n;
  }
  return {
    fleet,
    at: iso(Date.now()),
    servers: { total, by_status: byStatus, by_state: byState },
    reboot_groups: groups.map((g) => ({
      name: g.name,
      slots: g.slots,
      available_slots: g.available_slots,
      holders: g.holders.length,
      stuck: g.holders.filter((h) => h.stuck).length,
      queue_length: g.queue.length,
      paused: g.paused,
      open_now: g.open_now,
      has_windows: g.windows.length > 0,
    })),
    rollouts: moving.map((r) => {
      const counts = { ...zeros(ROLLOUT_TARGET_STATES), ...r.counts };
      return {
        id: r.id,
        agent: r.agent,
        image: r.image,
        version: r.version,
        state: r.state,
        pass: r.pass,
        counts,
        total: Object.values(counts).reduce((a, b) => a + b, 0),
        created_by: r.createdBy,
        created_at: iso(r.createdAt),
        updated_at: iso(r.updatedAt),
      };
    }),
    data: {
      version: upgrade.version,
      newest_version: NEWEST_VERSION,
      pending: UPGRADE_STEPS.filter((s) => s.version > upgrade.version).map((s) => ({ version: s.version, description: s.description })),
    },
  };
}
