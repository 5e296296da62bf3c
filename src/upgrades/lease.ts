import { and, eq, lt, sql } from "drizzle-orm";
import { auditInsert } from "../db/audit";
import type { Db } from "../db/client";
import { isUniqueViolation } from "../db/errors";
import { upgradeRuns, upgradeSteps } from "../db/schema";
import { currentHolder, type RunRow } from "./state";

/**
 * A holder that has not heartbeated for this long is presumed gone (its isolate was evicted or
 * its waitUntil cut short). Heartbeats come before every chunk, and a chunk is small, so a live
 * runner never comes near it; the cron (every minute) then takes over within two ticks.
 */
export const LEASE_TIMEOUT_MS = 90_000;

export type LeaseResult = { ok: true; run: RunRow; tookOver: RunRow | null } | { ok: false; holder: RunRow };

/** Raised when this runner's lease was taken over while it worked; it must stop at once. */
export class LeaseLost extends Error {
  constructor(runId: number) {
    super(`upgrade run ${runId} lost its lease`);
  }
}

/** The value every step commit writes: NULL (and so a failed batch) unless `runId` still runs. */
export const fenceOf = (runId: number) =>
  sql<number>`(SELECT ${upgradeRuns.id} FROM ${upgradeRuns} WHERE ${upgradeRuns.id} = ${runId} AND ${upgradeRuns.state} = 'running')`;

export function isFenceViolation(err: unknown) {
  const text = err instanceof Error ? `${err.message} ${(err as { cause?: Error }).cause?.message ?? ""}` : String(err);
  return /NOT NULL constraint failed: upgrade_state\.written_by_run/i.test(text);
}

/**
 * Acquiring is an INSERT that the partial unique index refuses while another run is unfinished,
 * so two runners racing cannot both win. A stale holder is expired and replaced in one batch; if
 * it heartbeated meanwhile, the expiry matches nothing, the INSERT is refused and we back off.
 */
export async function acquireLease(
  db: Db,
  runner: string,
  fromVersion: number,
  now: number,
  timeoutMs = LEASE_TIMEOUT_MS,
  retries = 3,
): Promise<LeaseResult> {
  const fresh = { runner, state: "running" as const, fromVersion, startedAt: now, heartbeatAt: now };
  try {
    const [run] = await db.insert(upgradeRuns).values(fresh).returning();
    return { ok: true, run, tookOver: null };
  } catch (err) {
    if (!isUniqueViolation(err)) throw err;
  }
  const holder = await currentHolder(db);
  // The holder finished between our INSERT and this read: the lease is free, try again.
  if (!holder && retries > 0) return acquireLease(db, runner, fromVersion, now, timeoutMs, retries - 1);
  if (!holder) throw new Error("upgrade lease kept changing hands; giving up this attempt");
  if (holder.heartbeatAt > now - timeoutMs) return { ok: false, holder };

  const why = `holder ${holder.runner} vanished (last heartbeat ${new Date(holder.heartbeatAt).toISOString()}); taken over by ${runner}`;
  try {
    const [, , inserted] = await db.batch([
      db
        .update(upgradeRuns)
        .set({ state: "expired", finishedAt: now, error: why })
        .where(
          and(
            eq(upgradeRuns.id, holder.id),
            eq(upgradeRuns.state, "running"),
            lt(upgradeRuns.heartbeatAt, now - timeoutMs),
          ),
        ),
      db
        .update(upgradeSteps)
        .set({ state: "abandoned", finishedAt: now, error: `${why}; its uncommitted chunk was discarded` })
        .where(and(eq(upgradeSteps.runId, holder.id), eq(upgradeSteps.state, "running"))),
      db
        .insert(upgradeRuns)
        .values({ ...fresh, tookOverFrom: holder.id })
        .returning(),
      auditInsert(
        db,
        {
          actor: `upgrade:${runner}`,
          action: "upgrade.lease.takeover",
          target: `upgrade-run:${holder.id}`,
          details: { reason: why },
        },
        now,
      ),
    ]);
    return { ok: true, run: inserted[0], tookOver: holder };
  } catch (err) {
    if (!isUniqueViolation(err)) throw err;
    const live = await currentHolder(db);
    if (!live && retries > 0) return acquireLease(db, runner, fromVersion, now, timeoutMs, retries - 1);
    if (!live) throw new Error("upgrade lease kept changing hands; giving up this attempt");
    return { ok: false, holder: live };
  }
}

/** Proves the lease is still ours before more work; a takeover shows as zero rows changed. */
export async function heartbeat(db: Db, runId: number, now: number) {
  const res = await db
    .update(upgradeRuns)
    .set({ heartbeatAt: now })
    .where(and(eq(upgradeRuns.id, runId), eq(upgradeRuns.state, "running")));
  if ((res.meta.changes ?? 0) === 0) throw new LeaseLost(runId);
}

export async function releaseLease(
  db: Db,
  runId: number,
  now: number,
  outcome: { state: "succeeded"; toVersion: number } | { state: "failed"; toVersion: number; error: string },
) {
  await db
    .update(upgradeRuns)
    .set({
      state: outcome.state,
      toVersion: outcome.toVersion,
      finishedAt: now,
      error: outcome.state === "failed" ? outcome.error : null,
    })
    .where(and(eq(upgradeRuns.id, runId), eq(upgradeRuns.state, "running")));
}

/** A run that found nothing left to do leaves no trace: the history records work, not polling. */
export async function dropRun(db: Db, runId: number) {
  await db.delete(upgradeRuns).where(and(eq(upgradeRuns.id, runId), eq(upgradeRuns.state, "running")));
}
