import { asc, eq, gt } from "drizzle-orm";
import type { Db } from "../db/client";
import { fleets } from "../db/schema";
import { iso } from "../lib/time";
import type { FleetSettings } from "../fleetlock/durable-object";

export type FleetRow = typeof fleets.$inferSelect;

export function fleetView(row: FleetRow) {
  return {
    id: row.id,
    capabilities: row.capabilities,
    stale_after_s: row.staleAfterS,
    lock_ttl_s: row.lockTtlS,
    allow_unknown_ids: row.allowUnknownIds,
    default_group_slots: row.defaultGroupSlots,
    created_at: iso(row.createdAt),
  };
}

export const getFleet = (db: Db, id: string) => db.query.fleets.findFirst({ where: eq(fleets.id, id) });

export const listFleets = (db: Db, after: string | null, limit: number) =>
  db
    .select()
    .from(fleets)
    .where(after ? gt(fleets.id, after) : undefined)
    .orderBy(asc(fleets.id))
    .limit(limit + 1);

/** The settings a fleet's coordinator keeps a copy of. */
export const fleetSettings = (row: FleetRow): FleetSettings => ({
  fleet_id: row.id,
  lock_ttl_s: row.lockTtlS,
  allow_unknown_ids: row.allowUnknownIds,
  default_group_slots: row.defaultGroupSlots,
});

