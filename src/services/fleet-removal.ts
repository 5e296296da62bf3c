/**
 * DELETE /v1/fleets/{fleet} (issue 8): only for a fleet whose servers are all removed. Its D1 rows
 * (tombstones included) go in one batch together with a removal marker; the fleet's coordinator
 * (groups, FleetLock key) is wiped after, retried from the cron until it is, and the id cannot be
 * reused before that, so a new fleet never inherits an old key.
 */
import { and, asc, count, eq, inArray, ne, sql } from "drizzle-orm";
import { auditInsert } from "../audit/log";
import type { Db } from "../db/client";
import {
  agentChannelHistory,
  agentChannels,
  agentInstances,
  fleetIntent,
  fleetRemovals,
  fleets,
  planMarks,
  roleProfiles,
  servers,
  tokens,
} from "../db/schema";
import type { Env } from "../env";
import { coordinatorOf } from "../fleetlock/stub";
import { ApiError } from "../http/errors";
import { changeIntent } from "./intent";

const NAMED_MAX = 20;

export async function deleteFleet(db: Db, env: Env, actor: string, fleet: string) {
  await changeIntent(db, fleet, async () => {
    const live = and(eq(servers.fleetId, fleet), ne(servers.state, "removed"));
    const [byState, named] = await db.batch([
      db.select({ state: servers.state, n: count() }).from(servers).where(live).groupBy(servers.state),
      db.select({ id: servers.id, hostname: servers.hostname, state: servers.state }).from(servers).where(live).orderBy(asc(servers.id)).limit(NAMED_MAX),
    ]);
    if (byState.length) {
      const total = byState.reduce((n, r) => n + r.n, 0);
      throw new ApiError(409, "fleet_not_empty", `fleet '${fleet}' still has ${total} server(s) not removed`, {
        by_state: Object.fromEntries(byState.map((r) => [r.state, r.n])),
        servers: named,
        more: Math.max(0, total - named.length),
      });
    }
    const ofFleet = sql`(SELECT id FROM ${servers} WHERE fleet_id = ${fleet})`;
    return {
      result: undefined,
      // Checked at commit: a server registered since the count above makes the batch roll back.
      guard: sql`NOT EXISTS (SELECT 1 FROM ${servers} WHERE fleet_id = ${fleet} AND state != 'removed')`,
      statements: [
        db.delete(tokens).where(inArray(tokens.serverId, ofFleet)),
        db.delete(agentInstances).where(eq(agentInstances.fleetId, fleet)),
        db.delete(planMarks).where(eq(planMarks.fleetId, fleet)),
        db.delete(servers).where(eq(servers.fleetId, fleet)),
        db.delete(roleProfiles).where(eq(roleProfiles.fleetId, fleet)),
        db.delete(agentChannels).where(eq(agentChannels.fleetId, fleet)),
        db.delete(agentChannelHistory).where(eq(agentChannelHistory.fleetId, fleet)),
        db.delete(fleets).where(eq(fleets.id, fleet)),
        db.delete(fleetIntent).where(eq(fleetIntent.fleetId, fleet)),
        db.insert(fleetRemovals).values({ fleetId: fleet, removedAt: Date.now() }).onConflictDoNothing(),
        auditInsert(db, { actor, action: "fleet.delete", target: `fleet:${fleet}` }),
      ],
    };
  });
  await wipeCoordinator(db, env, fleet);
}

/** Wipes a removed fleet's coordinator, then forgets the marker; a failure is left to the cron. */
export async function wipeCoordinator(db: Db, env: Env, fleet: string) {
  try {
    await coordinatorOf(env, fleet).forget();
    await db.delete(fleetRemovals).where(eq(fleetRemovals.fleetId, fleet));
  } catch (err) {
    console.warn(`wiping the coordinator of removed fleet ${fleet} failed; the cron retries`, err);
    await db
      .update(fleetRemovals)
      .set({ attempts: sql`${fleetRemovals.attempts} + 1` })
      .where(eq(fleetRemovals.fleetId, fleet))
      .catch(() => {});
  }
}

/** Cron backstop: finishes removals whose wipe failed. Reads only the (tiny) marker table. */
export async function finishFleetRemovals(db: Db, env: Env, limit = 20) {
  const rows = await db.select({ fleetId: fleetRemovals.fleetId }).from(fleetRemovals).limit(limit);
  for (const r of rows) await wipeCoordinator(db, env, r.fleetId);
  return rows.length;
}

export async function removalPending(db: Db, fleet: string) {
  return !!(await db.query.fleetRemovals.findFirst({ where: eq(fleetRemovals.fleetId, fleet) }));
}
