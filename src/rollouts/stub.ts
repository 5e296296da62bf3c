import type { Env } from "../env";

/** The Rollout object of one rollout; its Durable Object id derives from the rollout id. */
export const rolloutOf = (env: Env, rolloutId: string) => env.ROLLOUT.get(env.ROLLOUT.idFromName(rolloutId));

/** The reboot-slot holder id of a rollout's target: operators see the rollout in it. */
export const slotHolderId = (rolloutId: string, serverId: string) => `rollout:${rolloutId}:${serverId}`;
