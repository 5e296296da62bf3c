import type { Env } from "./env";
import { runFleetTasks } from "./fleets/tasks";
import { runPlanner } from "./planner/service";
import { runUpgrades } from "./upgrades/runner";
import { sendUpgradeEvents } from "./upgrades/notices";
import { sendStaleEvents } from "./webhooks/stale";
import { logLine } from "./lib/log";
import { redriveRollouts } from "./rollouts/service";
import { sweepImages } from "./images/service";
import { rollupIfDue } from "./history/rollup.service";
import { archiveAudit } from "./audit/archive.service";
import { sendAuditEvents } from "./audit/events.service";

/** Cron: upgrade steps first (they may change what reconciliation reads), then reconciliation. */
export async function runScheduled(controller: ScheduledController, env: Env) {
  const upgrade = await runUpgrades(env, { trigger: "cron" });
  // Webhooks: the steps' applied/failed events still owed (also, and above all, after a failure).
  await sendUpgradeEvents(env, Date.now()).catch((err) =>
    logLine("warn", "upgrade step events failed", { error: String(err) }),
  );
  // Reconciliation is written for the newest data; on older data it waits for the next tick.
  if (upgrade.version < upgrade.newest) {
    logLine("warn", "reconciliation skipped: data not at the newest version", {
      data_version: upgrade.version,
      newest_version: upgrade.newest,
      outcome: upgrade.outcome,
    });
    return;
  }
  // Planner backstop: only servers whose inputs changed (plan_marks), never a scan of every server.
  // (Staleness is not marked here: it is read from stale_at, src/model/server/staleness.ts.)
  await runPlanner(env, { budgetMs: 20_000 });
  // Coordinator work owed by fleet changes (settings pushes, wipes of deleted fleets).
  await runFleetTasks(env);
  // Webhooks: servers that went stale since the previous tick (only those, by their stale_at).
  await sendStaleEvents(env, Date.now()).catch((err) =>
    logLine("warn", "server.stale events failed", { error: String(err) }),
  );
  // Image uploads abandoned for a day are aborted; R2 deletes a crash left owed are done.
  await sweepImages(env, Date.now()).catch((err) => logLine("warn", "image sweep failed", { error: String(err) }));
  // The fleets' history: the first tick of each period rolls up (rows only for fleets that changed).
  await rollupIfDue(env, Date.now()).catch((err) => logLine("warn", "history rollup failed", { error: String(err) }));
  // Webhooks: audit.recorded, one event per fleet per tick with that fleet's new audit rows.
  const audited = await sendAuditEvents(env, Date.now()).catch((err) => {
    logLine("warn", "audit.recorded events failed", { error: String(err) });
    return null;
  });
  // The audit trail out: each UTC day that is over becomes an R2 file; D1 keeps AUDIT_RETENTION_DAYS.
  await archiveAudit(env, Date.now()).catch((err) => logLine("warn", "audit archive failed", { error: String(err) }));
  // Rollouts advance on their own (ledger events, their alarms); this only re-drives quiet ones.
  await redriveRollouts(env, controller.scheduledTime);
  // The console notices of the audit tick ran meanwhile; the cursor did not wait for them.
  await audited?.notices;
}
