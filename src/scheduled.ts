import { getDb } from "./db/client";
import type { Env } from "./env";
import { markStale } from "./reconcile/staleness";

/** Cron: upgrade steps first (they may change what reconciliation reads), then reconciliation. */
export async function runScheduled(controller: ScheduledController, env: Env) {
  const db = getDb(env.DB);
  await markStale(db, controller.scheduledTime);
}
