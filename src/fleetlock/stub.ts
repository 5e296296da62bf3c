import type { Env } from "../env";
import type { FleetRow } from "../fleet/fleets";
import type { FleetSettings } from "./durable-object";

// Ids are plain values, safe to keep across requests (stubs are not); deriving one hashes the name.
const ids = new Map<string, DurableObjectId>();
const IDS_MAX = 4096;

/** The coordinator of one fleet; its Durable Object id derives from the fleet id. */
export function coordinatorOf(env: Env, fleetId: string) {
  let id = ids.get(fleetId);
  if (!id) {
    id = env.REBOOT.idFromName(fleetId);
    if (ids.size >= IDS_MAX) ids.clear();
    ids.set(fleetId, id);
  }
  return env.REBOOT.get(id);
}

export const fleetSettings = (row: FleetRow): FleetSettings => ({
  fleet_id: row.id,
  lock_ttl_s: row.lockTtlS,
  allow_unknown_ids: row.allowUnknownIds,
  default_group_slots: row.defaultGroupSlots,
});
