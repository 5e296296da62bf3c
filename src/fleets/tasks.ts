/**
 * The coordinator work that follows fleet changes (docs/operator-guide.md). The fleet's coordinator copies its
 * lock settings and holds its groups and FleetLock key (a fleet spec's groups reach it as `apply_groups`, its webhooks as `apply_webhooks`;
 * server.stale events it could not take when the cron swept them, as `stale_events`); D1 changes first, and a `fleet_tasks` row
 * in the same batch (`fleetTask`, ./store.ts) says what the coordinator still has to be told. The
 * task is tried at once and retried by the cron until done, so an unreachable coordinator delays
 * the change but never loses it.
 */
import { and, asc, eq, inArray, lte, ne, sql } from "drizzle-orm";
import type { Db } from "../db/client";
import { getDb } from "../db/client";
import { fleetTasks, rollouts, servers } from "../db/schema";
import type { Env } from "../env";
import { getFleet, fleetSettings } from "./store";
import { coordinatorOf, ledgerOf, rolloutOf } from "../objects/stubs";

/**
 * A task's payload is exactly what the coordinator's RPC takes, so it is typed by that signature:
 * the fleets feature names none of the coordinator's or the webhooks' types.
 */
type Coordinator = ReturnType<typeof coordinatorOf>;
type PayloadOf<M extends "applyGroupSpec" | "applyWebhookSpec" | "fleetEvents"> = Parameters<
  Coordinator[M]
>[M extends "fleetEvents" ? 0 : 1];

async function runTask(env: Env, db: Db, task: typeof fleetTasks.$inferSelect) {
  if (task.kind === "apply_server_labels") return serverLabels(env, db, task);
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
  else {
    await coordinator.updateSettings(fleetSettings(row));
    await tellRollouts(env, db, row.id, row.disruptionBudget !== null && row.disruptionBudget !== undefined);
  }
}

/**
 * The fleet's rollouts in progress learn whether the fleet has a disruption budget now: a budget
 * set (or removed) while one runs applies to its targets not yet started, not only to later
 * rollouts. Each answers at once and writes only when it changes; a failure fails the task, which
 * the cron runs again.
 */
async function tellRollouts(env: Env, db: Db, fleet: string, on: boolean) {
  const active = await db
    .select({ id: rollouts.id })
    .from(rollouts)
    .where(and(inArray(rollouts.state, ["running", "paused", "rolling_back"]), eq(rollouts.fleetId, fleet)));
  await Promise.all(active.map((r) => rolloutOf(env, r.id).budgetChanged(on)));
}

/**
 * A fleet spec's labels for its live servers, each handed to the server's ledger as PATCH hands
 * them (setLabels: a merge, nothing written when it changes nothing, so a retried task is
 * harmless). A server that is gone, removed, or that a PATCH since filled past the labels' limit
 * refuses: that is the answer for it, not a failure to retry (the declaration stays, and a later
 * apply shows the difference again).
 */
async function serverLabels(env: Env, db: Db, task: typeof fleetTasks.$inferSelect) {
  const { actor, servers: patches } = task.payload as {
    actor: string;
    servers: Record<string, Record<string, string | null>>;
  };
  const hostnames = Object.keys(patches);
  for (let i = 0; i < hostnames.length; i += 80) {
    const part = hostnames.slice(i, i + 80);
    const rows = await db
      .select({ id: servers.id, hostname: servers.hostname })
      .from(servers)
      .where(and(eq(servers.fleetId, task.fleetId), ne(servers.state, "removed"), inArray(servers.hostname, part)));
    await Promise.all(
      rows.map(async (r) => {
        const result: { ok: boolean; message?: string } = await ledgerOf(env, r.id).setLabels(patches[r.hostname], {
          actor,
        });
        if (!result.ok)
          console.warn(`spec labels for ${r.hostname} in fleet ${task.fleetId} refused: ${result.message}`);
      }),
    );
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
