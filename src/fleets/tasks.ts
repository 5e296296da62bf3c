/**
 * The coordinator work that follows fleet changes (docs/operator-guide.md). The fleet's coordinator copies its
 * lock settings and holds its groups and FleetLock key (a fleet spec's groups reach it as `apply_groups`, its webhooks as `apply_webhooks`;
 * server.stale events it could not take when the cron swept them, as `stale_events`); D1 changes first, and a `fleet_tasks` row
 * in the same batch (`fleetTask`, ./store.ts) says what the coordinator still has to be told. The
 * task is tried at once and retried by the cron until done, so an unreachable coordinator delays
 * the change but never loses it.
 */
import { and, asc, eq, lte, sql } from "drizzle-orm";
import type { Db } from "../db/client";
import { getDb } from "../db/client";
import { fleetTasks } from "../db/schema";
import type { Env } from "../env";
import { getFleet, fleetSettings } from "./store";
import { coordinatorOf } from "../objects/stubs";

/**
 * A task's payload is exactly what the coordinator's RPC takes, so it is typed by that signature:
 * the fleets feature names none of the coordinator's or the webhooks' types.
 */
type Coordinator = ReturnType<typeof coordinatorOf>;
type PayloadOf<M extends "applyGroupSpec" | "applyWebhookSpec" | "fleetEvents"> = Parameters<
  Coordinator[M]
>[M extends "fleetEvents" ? 0 : 1];

async function runTask(env: Env, db: Db, task: typeof fleetTasks.$inferSelect) {
  const coordinator = coordinatorOf(env, task.fleetId);
  if (task.kind === "wipe") {
    await coordinator.forget();
    return;
  }
  // The settings as D1 holds them now: a later PATCH's task pushes the same, or newer.
  const row = await getFleet(db, task.fleetId);
  if (!row) return;
  if (task.kind === "apply_groups")
    await coordinator.applyGroupSpec(fleetSettings(row), task.payload as PayloadOf<"applyGroupSpec">);
  else if (task.kind === "apply_webhooks")
    await coordinator.applyWebhookSpec(fleetSettings(row), task.payload as PayloadOf<"applyWebhookSpec">);
  else if (task.kind === "stale_events") await coordinator.fleetEvents(task.payload as PayloadOf<"fleetEvents">);
  else await coordinator.updateSettings(fleetSettings(row));
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
