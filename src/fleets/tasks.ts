/**
 * Fleet deletion and the coordinator work that follows fleet changes (issue 8). The fleet's
 * coordinator copies its lock settings and holds its groups and FleetLock key; D1 changes first,
 * and a `fleet_tasks` row in the same batch says what the coordinator still has to be told. The
 * task is tried at once and retried by the cron until done, so an unreachable coordinator delays
 * the change but never loses it.
 */
import { and, asc, count, eq, inArray, lte, ne, sql } from "drizzle-orm";
import { auditInsert } from "../audit/log";
import type { Db } from "../db/client";
import { getDb } from "../db/client";
import {
  agentChannelHistory,
  agentChannels,
  agentInstances,
  fleetIntent,
  fleets,
  fleetTasks,
  planMarks,
  roleProfiles,
  servers,
  tokens,
} from "../db/schema";
import type { FleetTaskKind } from "../domain/enums";
import type { Env } from "../env";
import { getFleet, fleetSettings } from "./store";
import { ApiError } from "../http/errors";
import { changeIntent } from "../intent/service";
import { coordinatorOf } from "../objects/stubs";

const NAMED_MAX = 20;

/** The statement that records a task for the fleet's coordinator (a newer one replaces an older). */
export const fleetTask = (db: Db, fleet: string, kind: FleetTaskKind, rev: number) =>
  db
    .insert(fleetTasks)
    .values({ fleetId: fleet, kind, rev, createdAt: Date.now() })
    .onConflictDoUpdate({ target: [fleetTasks.fleetId, fleetTasks.kind], set: { rev, attempts: 0 } });

export async function deleteFleet(env: Env, actor: string, fleet: string) {
  const db = getDb(env.DB);
  await changeIntent(db, fleet, async ({ rev }) => {
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
        db.delete(fleetTasks).where(and(eq(fleetTasks.fleetId, fleet), eq(fleetTasks.kind, "push_settings"))),
        fleetTask(db, fleet, "wipe", rev + 1),
        auditInsert(db, { actor, action: "fleet.delete", target: `fleet:${fleet}` }),
      ],
    };
  });
  await runFleetTasks(env, { fleet });
}

/** Whether the fleet id is still being cleaned up after a deletion (it cannot be created yet). */
export async function removalPending(db: Db, fleet: string) {
  return !!(await db.query.fleetTasks.findFirst({ where: and(eq(fleetTasks.fleetId, fleet), eq(fleetTasks.kind, "wipe")) }));
}

async function runTask(env: Env, db: Db, task: typeof fleetTasks.$inferSelect) {
  const coordinator = coordinatorOf(env, task.fleetId);
  if (task.kind === "wipe") {
    await coordinator.forget();
  } else {
    // The settings as D1 holds them now: a later PATCH's task pushes the same, or newer.
    const row = await getFleet(db, task.fleetId);
    if (row) await coordinator.updateSettings(fleetSettings(row));
  }
}

/** Runs pending coordinator tasks (of one fleet, or the oldest of all): at once after a change, and from the cron. */
export async function runFleetTasks(env: Env, opts: { fleet?: string; limit?: number } = {}) {
  const db = getDb(env.DB);
  const tasks = await db
    .select()
    .from(fleetTasks)
    .where(opts.fleet ? eq(fleetTasks.fleetId, opts.fleet) : undefined)
    .orderBy(asc(fleetTasks.createdAt))
    .limit(opts.limit ?? 50);
  let failed = 0;
  for (const t of tasks) {
    try {
      await runTask(env, db, t);
      await db
        .delete(fleetTasks)
        .where(and(eq(fleetTasks.fleetId, t.fleetId), eq(fleetTasks.kind, t.kind), lte(fleetTasks.rev, t.rev)));
    } catch (err) {
      failed++;
      console.warn(`coordinator task ${t.kind} for fleet ${t.fleetId} failed; the cron retries`, err);
      await db
        .update(fleetTasks)
        .set({ attempts: sql`${fleetTasks.attempts} + 1` })
        .where(and(eq(fleetTasks.fleetId, t.fleetId), eq(fleetTasks.kind, t.kind)))
        .catch(() => {});
    }
  }
  return { tasks: tasks.length, failed };
}
