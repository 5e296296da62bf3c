/**
 * Test support shared by the workerd tests: the objects by name, the cron run once, the index row
 * a ledger projects, and polling with a deadline. One copy here instead of one per test file.
 */
import { createExecutionContext, createScheduledController, env, waitOnExecutionContext } from "cloudflare:test";
import worker from "../../src/index";

/** A server's ledger (ServerLedger), by server id. */
export const ledger = (id: string) => env.LEDGER.get(env.LEDGER.idFromName(id));

/** A fleet's coordinator (RebootCoordinator), by fleet id. */
export const coordinator = (fleet: string) => env.REBOOT.get(env.REBOOT.idFromName(fleet));

export const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** Polls `pred` every 50 ms until it holds; throws after `ms`. */
export async function until(pred: () => Promise<boolean>, ms = 5_000) {
  const deadline = Date.now() + ms;
  while (!(await pred())) {
    if (Date.now() > deadline) throw new Error("condition not met in time");
    await sleep(50);
  }
}

/** A server's index row as the quiet watch keeps it: when it was last seen and when it goes stale. */
export const indexRow = (id: string) =>
  env.DB.prepare("SELECT last_seen, stale_at FROM servers WHERE id = ?")
    .bind(id)
    .first<{ last_seen: number; stale_at: number }>();

/** One cron tick, as the deployed trigger runs it, to the end of its background work. */
export async function scheduledRun() {
  const ctx = createExecutionContext();
  await worker.scheduled(createScheduledController({ scheduledTime: Date.now(), cron: "* * * * *" }), env, ctx);
  await waitOnExecutionContext(ctx);
}
