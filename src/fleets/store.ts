import { inVisibleFleets } from "../db/access";
import { and, asc, count, eq, gt, inArray, ne, notInArray, sql, type SQL } from "drizzle-orm";
import type { Db } from "../db/client";
import {
  agentChannelHistory,
  agentChannels,
  agentInstances,
  fleetHistory,
  fleetIntent,
  fleets,
  fleetTasks,
  planMarks,
  roleProfiles,
  fleetSsoMappings,
  serverLabels,
  specServerLabels,
  servers,
  tokens,
} from "../db/schema";
import type { FleetTaskKind } from "../domain/enums";
import { iso } from "../lib/time";
import type { FleetSettings } from "../model/fleet";

export type FleetRow = typeof fleets.$inferSelect;

export function fleetView(row: FleetRow) {
  return {
    id: row.id,
    capabilities: row.capabilities,
    stale_after_s: row.staleAfterS,
    lock_ttl_s: row.lockTtlS,
    allow_unknown_ids: row.allowUnknownIds,
    default_group_slots: row.defaultGroupSlots,
    disruption_budget: row.disruptionBudget ?? null,
    image_policy: row.imagePolicy,
    created_at: iso(row.createdAt),
  };
}

export const getFleet = (db: Db, id: string) => db.query.fleets.findFirst({ where: eq(fleets.id, id) });

export const listFleets = (db: Db, visible: readonly string[] | null, after: string | null, limit: number) =>
  db
    .select()
    .from(fleets)
    .where(and(inVisibleFleets(fleets.id, visible), after ? gt(fleets.id, after) : undefined))
    .orderBy(asc(fleets.id))
    .limit(limit + 1);

/** The settings a fleet's coordinator keeps a copy of. */
export const fleetSettings = (row: FleetRow): FleetSettings => ({
  fleet_id: row.id,
  lock_ttl_s: row.lockTtlS,
  allow_unknown_ids: row.allowUnknownIds,
  default_group_slots: row.defaultGroupSlots,
  disruption_budget: row.disruptionBudget ?? null,
});

/** The statement that records a task for the fleet's coordinator (a newer one replaces an older, payload and all). */
export const fleetTask = (db: Db, fleet: string, kind: FleetTaskKind, rev: number, payload: unknown = null) =>
  db
    .insert(fleetTasks)
    .values({ fleetId: fleet, kind, rev, createdAt: Date.now(), payload })
    .onConflictDoUpdate({ target: [fleetTasks.fleetId, fleetTasks.kind], set: { rev, attempts: 0, payload } });

/**
 * Events the fleet's coordinator could not take (the cron's server.stale sweep), added to those it
 * is owed already: one `stale_events` task per fleet, its payload the events. A newer revision
 * keeps a delivery under way from deleting what was added meanwhile (runFleetTasks deletes up to
 * the revision it sent). The newest OWED_EVENTS_MAX are kept, so a coordinator unreachable for
 * days cannot grow the row past D1's limit; the hosts of older deadlines have long read as stale.
 */
const OWED_EVENTS_MAX = 1000;
export const owedEvents = (db: Db, fleet: string, events: { time: number }[], now: number) =>
  db
    .insert(fleetTasks)
    .values({ fleetId: fleet, kind: "stale_events", rev: now, createdAt: now, payload: events })
    .onConflictDoUpdate({
      target: [fleetTasks.fleetId, fleetTasks.kind],
      set: {
        rev: sql`max(${fleetTasks.rev} + 1, excluded.rev)`,
        payload: sql`(SELECT json_group_array(json(value)) FROM (
          SELECT value FROM (SELECT value FROM json_each(fleet_tasks.payload) UNION ALL SELECT value FROM json_each(${JSON.stringify(events)}))
          ORDER BY json_extract(value, '$.time') DESC LIMIT ${OWED_EVENTS_MAX}))`,
      },
    });

/** Whether the fleet id is still being cleaned up after a deletion (it cannot be created yet). */
export async function removalPending(db: Db, fleet: string) {
  return !!(await db.query.fleetTasks.findFirst({
    where: and(eq(fleetTasks.fleetId, fleet), eq(fleetTasks.kind, "wipe")),
  }));
}

/** The fleet's servers that are not removed: how many in each state, and the first `named` of them. */
export async function liveServersOf(db: Db, fleet: string, named: number) {
  const live = and(eq(servers.fleetId, fleet), ne(servers.state, "removed"));
  const [byState, first] = await db.batch([
    db.select({ state: servers.state, n: count() }).from(servers).where(live).groupBy(servers.state),
    db
      .select({ id: servers.id, hostname: servers.hostname, state: servers.state })
      .from(servers)
      .where(live)
      .orderBy(asc(servers.id))
      .limit(named),
  ]);
  return { byState, named: first };
}

/** One page of the fleet's servers that can still be asked anything (not removed or being removed). */
export const liveServerIdsOfFleet = (db: Db, fleet: string, after: string | null, limit: number) =>
  db
    .select({ id: servers.id })
    .from(servers)
    .where(
      and(
        eq(servers.fleetId, fleet),
        notInArray(servers.state, ["removed", "decommissioning"]),
        after ? gt(servers.id, after) : undefined,
      ),
    )
    .orderBy(asc(servers.id))
    .limit(limit + 1);

/** The fleet's row is still there: an intent write that read the fleet before its deletion must not land after it. */
export const fleetExists = (fleet: string) => sql`EXISTS (SELECT 1 FROM ${fleets} WHERE id = ${fleet})`;

/** Checked at commit by a fleet's deletion: a server registered since its count rolls it back. */
export const noLiveServers = (fleet: string) =>
  sql`NOT EXISTS (SELECT 1 FROM ${servers} WHERE fleet_id = ${fleet} AND state != 'removed')`;

/** Every D1 row of the fleet (its removed servers' tombstones and tokens too), and its pending coordinator pushes. */
export function fleetWipe(db: Db, fleet: string) {
  const ofFleet = sql`(SELECT id FROM ${servers} WHERE fleet_id = ${fleet})`;
  return [
    db.delete(tokens).where(inArray(tokens.serverId, ofFleet)),
    db.delete(agentInstances).where(eq(agentInstances.fleetId, fleet)),
    db.delete(serverLabels).where(eq(serverLabels.fleetId, fleet)),
    db.delete(specServerLabels).where(eq(specServerLabels.fleetId, fleet)),
    db.delete(planMarks).where(eq(planMarks.fleetId, fleet)),
    db.delete(servers).where(eq(servers.fleetId, fleet)),
    db.delete(roleProfiles).where(eq(roleProfiles.fleetId, fleet)),
    db.delete(agentChannels).where(eq(agentChannels.fleetId, fleet)),
    db.delete(agentChannelHistory).where(eq(agentChannelHistory.fleetId, fleet)),
    db.delete(fleets).where(eq(fleets.id, fleet)),
    db.delete(fleetIntent).where(eq(fleetIntent.fleetId, fleet)),
    db.delete(fleetHistory).where(eq(fleetHistory.fleetId, fleet)),
    // Its spec's SSO access: a fleet created later under the name must not inherit who may act on it.
    db.delete(fleetSsoMappings).where(eq(fleetSsoMappings.fleetId, fleet)),
    // Settings and spec groups owed to a coordinator that is about to be wiped are moot.
    db.delete(fleetTasks).where(and(eq(fleetTasks.fleetId, fleet), ne(fleetTasks.kind, "wipe"))),
  ] as const;
}

/**
 * The statement that moves the fleet's intent revision from `expected` to `expected + 1`. It goes
 * in the batch of every change of a plan input: if another change committed since `expected` was
 * read, the NOT NULL fails and the whole batch rolls back (the caller re-reads and retries), so
 * changes of one fleet's intent apply one after another, each on the state it checked.
 */
export const bumpIntentRev = (db: Db, fleet: string, expected: number, guard?: SQL) =>
  db
    .insert(fleetIntent)
    .values({
      fleetId: fleet,
      rev: sql`CASE WHEN coalesce((SELECT rev FROM ${fleetIntent} WHERE fleet_id = ${fleet}), 0) = ${expected}
        ${guard ? sql`AND (${guard})` : sql``} THEN ${expected + 1} ELSE NULL END`,
    })
    .onConflictDoUpdate({ target: fleetIntent.fleetId, set: { rev: sql`excluded.rev` } });

export function isIntentConflict(err: unknown) {
  const text = err instanceof Error ? `${err.message} ${(err as { cause?: Error }).cause?.message ?? ""}` : String(err);
  return /NOT NULL constraint failed: fleet_intent\.rev/i.test(text);
}
