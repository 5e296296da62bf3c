/**
 * Data upgrades as operators see them: where the upgrade stands (GET /v1/upgrades) and a run on
 * demand (POST /v1/upgrades/run). The runner (./runner.ts) does the work; this reads its tables
 * and speaks its outcomes in the API's error codes.
 */
import { auditInsert } from "../db/audit";
import { getDb } from "../db/client";
import { DomainError } from "../domain/errors";
import type { Env } from "../env";
import { iso, isoOrNull } from "../lib/time";
import { LEASE_TIMEOUT_MS } from "./lease";
import { runUpgrades } from "./runner";
import { currentHolder, latestRun, listAttempts, readUpgradeState, type RunRow } from "./state";
import { NEWEST_VERSION, UPGRADE_STEPS } from "./steps";

/** Seconds after which a failed run is worth asking for again (the API stays drained meanwhile). */
const FAILED_RETRY_AFTER_S = 60;

const runView = (r: RunRow) => ({
  id: r.id,
  runner: r.runner,
  state: r.state,
  from_version: r.fromVersion,
  to_version: r.toVersion,
  took_over_from: r.tookOverFrom,
  started_at: iso(r.startedAt),
  heartbeat_at: iso(r.heartbeatAt),
  finished_at: isoOrNull(r.finishedAt),
  error: r.error,
});

/** The data version, the pending steps, the lease, the last run and a page of step attempts (newest first). */
export async function upgradeStatus(env: Env, before: number | null, limit: number) {
  const db = getDb(env.DB);
  const [state, holder, last, attempts] = await Promise.all([
    readUpgradeState(db),
    currentHolder(db),
    latestRun(db),
    listAttempts(db, before, limit),
  ]);
  const now = Date.now();
  const current = state.version >= NEWEST_VERSION;
  return {
    state: current
      ? ("current" as const)
      : holder
        ? ("running" as const)
        : last?.state === "failed"
          ? ("failing" as const)
          : ("pending" as const),
    data_version: state.version,
    newest_version: NEWEST_VERSION,
    pending: UPGRADE_STEPS.filter((s) => s.version > state.version).map((s) => ({
      version: s.version,
      description: s.description,
    })),
    lease: holder ? { ...runView(holder), stale: holder.heartbeatAt < now - LEASE_TIMEOUT_MS } : null,
    last_run: last ? runView(last) : null,
    attempts,
  };
}

/** An operator's run: every pending step applied now, or the reason it could not be (audited when it did anything). */
export async function runUpgradesNow(env: Env, actor: string) {
  const result = await runUpgrades(env, { trigger: "operator", by: `operator(${actor})` });
  if (result.outcome !== "up_to_date") {
    await auditInsert(getDb(env.DB), {
      actor,
      action: "upgrade.run",
      target: "upgrades",
      details: { outcome: result.outcome, data_version: result.version },
    });
  }
  const versions = { data_version: result.version, newest_version: result.newest };
  switch (result.outcome) {
    case "up_to_date":
      return { outcome: result.outcome, ...versions, run_id: null, applied: [] };
    case "applied":
      return { outcome: result.outcome, ...versions, run_id: result.run_id, applied: result.applied };
    case "lease_held":
      throw new DomainError("upgrade_lease_held", `runner ${result.holder.runner} is applying the steps now`, {
        ...versions,
        lease: runView(result.holder),
      });
    case "lease_lost":
      throw new DomainError("upgrade_lease_held", "another runner took the lease over during this run", {
        ...versions,
        run_id: result.run_id,
      });
    case "failed":
      throw new DomainError(
        "upgrade_failed",
        `upgrade step ${result.failed_step} failed: ${result.error}`,
        {
          ...versions,
          run_id: result.run_id,
          applied: result.applied,
          failed_step: result.failed_step,
          error: result.error,
        },
        { retryAfterS: FAILED_RETRY_AFTER_S },
      );
    case "backing_off":
      // Only request-triggered runs back off; an operator's never does.
      throw new Error("unreachable: operator runs do not back off");
  }
}
