import { and, eq } from "drizzle-orm";
import { auditInsert } from "../db/audit";
import { getDb, type Db } from "../db/client";
import { upgradeState, upgradeSteps } from "../db/schema";
import type { Env } from "../env";
import {
  acquireLease,
  dropRun,
  fenceOf,
  heartbeat,
  isFenceViolation,
  LEASE_TIMEOUT_MS,
  LeaseLost,
  releaseLease,
} from "./lease";
import { latestRun, readUpgradeState, type RunRow } from "./state";
import { newestVersion, type UpgradeStep } from "./step";
import { UPGRADE_STEPS } from "./steps";

/** After a failed run, request-triggered runs wait this long; the cron and operators do not. */
const REQUEST_RETRY_BACKOFF_MS = 60_000;

type Trigger = "cron" | "request" | "operator";

export interface RunOptions {
  trigger: Trigger;
  /** Who asked, for the history (an operator's token id); defaults to the trigger. */
  by?: string;
  /** The step list; tests inject failing or slow steps here. */
  steps?: readonly UpgradeStep[];
  leaseTimeoutMs?: number;
  clock?: () => number;
}

export type RunOutcome =
  | { outcome: "up_to_date"; version: number; newest: number }
  | {
      outcome: "applied";
      version: number;
      newest: number;
      run_id: number;
      from: number;
      applied: number[];
      took_over_from: number | null;
    }
  | {
      outcome: "failed";
      version: number;
      newest: number;
      run_id: number;
      from: number;
      applied: number[];
      failed_step: number;
      error: string;
    }
  | { outcome: "lease_held"; version: number; newest: number; holder: RunRow }
  | { outcome: "lease_lost"; version: number; newest: number; run_id: number }
  | { outcome: "backing_off"; version: number; newest: number; last_run: RunRow };

const MAX_ERROR_CHARS = 2000;
const errorText = (err: unknown) =>
  (err instanceof Error ? err.message || err.name : String(err)).slice(0, MAX_ERROR_CHARS);

/**
 * Brings the data from its stored version to the newest in one go (version skipping: docs/design.md
 * §4 "Upgrade steps"), under the singleton lease. A failing step stops the run where it is: its version
 * is not bumped, the failure is recorded, and the next run starts that step again (from its last
 * committed chunk).
 */
export async function runUpgrades(env: Env, opts: RunOptions): Promise<RunOutcome> {
  const steps = opts.steps ?? UPGRADE_STEPS;
  const newest = newestVersion(steps);
  const clock = opts.clock ?? Date.now;
  const db = getDb(env.DB);

  const before = await readUpgradeState(db);
  if (before.version >= newest) return { outcome: "up_to_date", version: before.version, newest };

  if (opts.trigger === "request") {
    const last = await latestRun(db);
    if (last?.state === "failed" && clock() - (last.finishedAt ?? 0) < REQUEST_RETRY_BACKOFF_MS) {
      return { outcome: "backing_off", version: before.version, newest, last_run: last };
    }
  }

  const runner = `${opts.by ?? opts.trigger}:${crypto.randomUUID()}`;
  const lease = await acquireLease(db, runner, before.version, clock(), opts.leaseTimeoutMs ?? LEASE_TIMEOUT_MS);
  if (!lease.ok) return { outcome: "lease_held", version: before.version, newest, holder: lease.holder };
  const run = lease.run;

  // Another runner may have finished while we queued for the lease.
  const start = await readUpgradeState(db);
  if (start.version >= newest) {
    if (lease.tookOver) await releaseLease(db, run.id, clock(), { state: "succeeded", toVersion: start.version });
    else await dropRun(db, run.id);
    return { outcome: "up_to_date", version: start.version, newest };
  }

  const applied: number[] = [];
  let version = start.version;
  for (const step of steps.filter((s) => s.version > start.version)) {
    try {
      await applyStep(db, env, step, run.id, runner, start, clock);
    } catch (err) {
      if (err instanceof LeaseLost || isFenceViolation(err)) {
        // The runner that took over owns the history now; writing more would contradict it.
        console.warn(`upgrade run ${run.id} lost its lease during step ${step.version}`);
        return { outcome: "lease_lost", version, newest, run_id: run.id };
      }
      const error = errorText(err);
      console.error(`upgrade step ${step.version} failed:`, err);
      await releaseLease(db, run.id, clock(), {
        state: "failed",
        toVersion: version,
        error: `step ${step.version}: ${error}`,
      });
      return {
        outcome: "failed",
        version,
        newest,
        run_id: run.id,
        from: start.version,
        applied,
        failed_step: step.version,
        error,
      };
    }
    applied.push(step.version);
    version = step.version;
  }
  await releaseLease(db, run.id, clock(), { state: "succeeded", toVersion: version });
  return {
    outcome: "applied",
    version,
    newest,
    run_id: run.id,
    from: start.version,
    applied,
    took_over_from: lease.tookOver?.id ?? null,
  };
}

/**
 * Runs one step chunk by chunk. Each chunk's statements commit in one batch with the cursor, and
 * the last chunk's with the version bump and the history row, so the version never runs ahead of
 * the data and never behind a committed step.
 */
async function applyStep(
  db: Db,
  env: Env,
  step: UpgradeStep,
  runId: number,
  runner: string,
  start: { version: number; cursorVersion: number | null; cursor: string | null },
  clock: () => number,
) {
  const [attempt] = await db
    .insert(upgradeSteps)
    .values({
      runId,
      version: step.version,
      description: step.description,
      runner,
      state: "running",
      startedAt: clock(),
    })
    .returning();
  let cursor = start.cursorVersion === step.version ? start.cursor : null;
  let chunks = 0;
  try {
    for (;;) {
      await heartbeat(db, runId, clock());
      const now = clock();
      const { statements, next } = await step.chunk({ db, env, now }, cursor);
      chunks += 1;
      const done = next === null;
      const onlyFromPrevious = and(eq(upgradeState.id, 1), eq(upgradeState.version, step.version - 1));
      const bookkeeping = done
        ? [
            db
              .update(upgradeState)
              .set({
                version: step.version,
                cursorVersion: null,
                cursor: null,
                writtenByRun: fenceOf(runId),
                updatedAt: now,
              })
              .where(onlyFromPrevious),
            db
              .update(upgradeSteps)
              .set({ state: "applied", chunks, finishedAt: now })
              .where(eq(upgradeSteps.id, attempt.id)),
            auditInsert(
              db,
              {
                actor: `upgrade:${runner}`,
                action: "upgrade.step.applied",
                target: `upgrade:${step.version}`,
                details: { description: step.description, run_id: runId, chunks },
              },
              now,
            ),
          ]
        : [
            db
              .update(upgradeState)
              .set({ cursorVersion: step.version, cursor: next, writtenByRun: fenceOf(runId), updatedAt: now })
              .where(onlyFromPrevious),
            db.update(upgradeSteps).set({ chunks }).where(eq(upgradeSteps.id, attempt.id)),
          ];
      await db.batch([...statements, ...bookkeeping] as [(typeof bookkeeping)[0], ...typeof bookkeeping]);
      if (done) return;
      cursor = next;
    }
  } catch (err) {
    if (!(err instanceof LeaseLost) && !isFenceViolation(err)) {
      await db
        .update(upgradeSteps)
        .set({ state: "failed", chunks, finishedAt: clock(), error: errorText(err) })
        .where(and(eq(upgradeSteps.id, attempt.id), eq(upgradeSteps.state, "running")));
    }
    throw err;
  }
}
