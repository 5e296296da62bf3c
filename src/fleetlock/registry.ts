import type { Env } from "../env";
import type { ServerIdentity } from "./durable-object";
import { coordinatorOf } from "./stub";

/**
 * Tells the fleet's coordinator which server a FleetLock id belongs to, after the server's
 * ledger (the truth) has committed. Never throws: a miss is repaired on the host path, where the
 * coordinator looks an unknown id up in D1 once before refusing it.
 */
export async function pushServerIdentity(env: Env, fleetId: string, serverId: string, identity: ServerIdentity) {
  try {
    await coordinatorOf(env, fleetId).setServerIdentity(serverId, identity);
  } catch (err) {
    console.warn(`fleetlock registry push for server ${serverId} failed; the coordinator repairs it on first use`, err);
  }
}
