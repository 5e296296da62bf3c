import type { Env } from "../env";
import type { FleetRow } from "../fleet/fleets";
import type { FleetSettings } from "./durable-object";

/** The coordinator of one fleet; its Durable Object id derives from the fleet id. */
export const coordinatorOf = (env: Env, fleetId: string) => env.REBOOT.get(env.REBOOT.idFromName(fleetId));

export const fleetSettings = (row: FleetRow): FleetSettings => ({
  fleet_id: row.id,
  lock_ttl_s: row.lockTtlS,
  allow_unknown_ids: row.allowUnknownIds,
  default_group_slots: row.defaultGroupSlots,
});
