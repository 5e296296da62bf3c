/**
 * A fleet at a glance, for the operator console's overview (docs/console.md): counts from D1 aggregates
 * over indexes (never by paging through servers), the reboot groups from the fleet's coordinator
 * and the data version. A constant number of statements whatever the fleet's size.
 */
import { and, desc, eq, inArray } from "drizzle-orm";
import { getDb } from "../db/client";
import { rollouts } from "../db/schema";
import { ROLLOUT_TARGET_STATES } from "../domain/enums";
import type { Env } from "../env";
import { notFound } from "../domain/errors";
import { iso } from "../lib/time";
import { fleetServerCounts, zeros } from "./counts";
import { coordinatorOf } from "../objects/stubs";
import { readUpgradeState } from "../upgrades/state";
import { NEWEST_VERSION, UPGRADE_STEPS } from "../upgrades/steps";
import { fleetSettings, getFleet } from "../fleets/store";
import type { FleetSummary } from "./schemas";

/** The rollout states in which a rollout still moves (the partial index rollouts_active_idx). */
const MOVING = ["running", "paused", "rolling_back"] as const;

export async function fleetSummary(env: Env, fleet: string): Promise<FleetSummary> {
  const db = getDb(env.DB);
  const now = Date.now();
  const row = await getFleet(db, fleet);
  if (!row) throw notFound("fleet", fleet);
  const [counts, moving, upgrade, groups] = await Promise.all([
    // The aggregate `hm status` shares (./counts.ts).
    fleetServerCounts(db, fleet, now),
    // The literal IN list is the partial index's own WHERE, so SQLite reads only moving rollouts.
    db
      .select()
      .from(rollouts)
      .where(and(inArray(rollouts.state, [...MOVING]), eq(rollouts.fleetId, fleet)))
      .orderBy(desc(rollouts.createdAt)),
    readUpgradeState(db),
    coordinatorOf(env, fleet).listGroups(fleetSettings(row)),
  ]);
  return {
    fleet,
    at: iso(Date.now()),
    servers: counts,
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
      pending: UPGRADE_STEPS.filter((s) => s.version > upgrade.version).map((s) => ({
        version: s.version,
        description: s.description,
      })),
    },
  };
}
