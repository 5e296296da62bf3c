import type { Env } from "../env";
import type { FleetRow } from "../fleet/fleets";
import { coordinatorOf, fleetSettings } from "../fleetlock/stub";

/**
 * The coordinator keeps a copy of the fleet's lock settings for the host path. Every operator call
 * on reboot groups re-syncs it from D1; this brings a PATCH there at once. Best effort: a miss is
 * corrected by the next operator call on the fleet's groups.
 */
export async function pushFleetSettings(env: Env, row: FleetRow) {
  try {
    await coordinatorOf(env, row.id).updateSettings(fleetSettings(row));
  } catch (err) {
    console.warn(`pushing settings of fleet ${row.id} to its coordinator failed`, err);
  }
}
