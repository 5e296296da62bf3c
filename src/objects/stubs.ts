import type { Env } from "../env";

// Ids are plain values, safe to keep across requests (stubs are not); deriving one hashes the name.
const ids = new Map<string, DurableObjectId>();
const IDS_MAX = 4096;
const ledgerIds = new Map<string, DurableObjectId>();

/** The ledger of one server; its Durable Object id derives from the server id (every host request). */
export function ledgerOf(env: Env, serverId: string) {
  let id = ledgerIds.get(serverId);
  if (!id) {
    id = env.LEDGER.idFromName(serverId);
    if (ledgerIds.size >= IDS_MAX) ledgerIds.clear();
    ledgerIds.set(serverId, id);
  }
  return env.LEDGER.get(id);
}

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

/**
 * The outbox lane of a call to an object (src/objects/kit/pool.ts): one call at a time to each
 * receiver, so one that hangs holds a single slot of the caller's.
 */
export const lane = {
  coordinator: (fleetId: string) => `coordinator:${fleetId}`,
  rollout: (rolloutId: string) => `rollout:${rolloutId}`,
  feed: (fleetId: string) => `feed:${fleetId}`,
  ledger: (serverId: string) => `ledger:${serverId}`,
};

/** The Rollout object of one rollout; its Durable Object id derives from the rollout id. */
export const rolloutOf = (env: Env, rolloutId: string) => env.ROLLOUT.get(env.ROLLOUT.idFromName(rolloutId));
