/**
 * upgrade.step_applied / upgrade.step_failed for every fleet's webhooks. The step's history row is
 * the outbox: the runner writes it (applied or failed) with `notified_at` NULL in the step's own
 * batch, so a crash between the step and its notice loses nothing; the cron then hands each fleet's
 * coordinator the events of the rows still owed (read through a partial index) and marks them.
 * The event id is derived from the row, so a tick that dies before marking sends nothing twice:
 * the coordinators drop what they took already. A failure's id is its version's and its error's,
 * not its attempt's: the cron retries a failing step every minute, and a step that keeps failing
 * the same way is one event (again once its error changes, or after the 7 days a coordinator
 * remembers ids), not a webhook delivery a minute.
 */
import { and, asc, inArray, isNull, ne } from "drizzle-orm";
import { getDb } from "../db/client";
import { fleets, upgradeSteps } from "../db/schema";
import type { Env } from "../env";
import { chunk } from "../lib/chunk";
import { sha256Hex } from "../lib/crypto";
import { logLine } from "../lib/log";
import { coordinatorOf } from "../objects/stubs";
import type { FleetEvent } from "../webhooks/events";
import { ownedEvent } from "../webhooks/outbox";

const ROWS_PER_TICK = 50;
const FLEETS_AT_ONCE = 16;

export async function sendUpgradeEvents(env: Env, now: number): Promise<{ sent: number }> {
  const db = getDb(env.DB);
  const owed = await db
    .select()
    .from(upgradeSteps)
    .where(and(isNull(upgradeSteps.notifiedAt), ne(upgradeSteps.state, "running")))
    .orderBy(asc(upgradeSteps.id))
    .limit(ROWS_PER_TICK);
  if (owed.length === 0) return { sent: 0 };
  const fleetIds = (await db.select({ id: fleets.id }).from(fleets)).map((f) => f.id);
  // An abandoned attempt (its lease was taken over) is marked too, but sends nothing.
  const told = owed.filter((s) => s.state === "applied" || s.state === "failed");
  const ids = await Promise.all(
    told.map(async (s) =>
      s.state === "failed"
        ? `upgrade:${s.version}:failed:${(await sha256Hex(s.error ?? "")).slice(0, 16)}`
        : `upgrade:${s.id}:${s.state}`,
    ),
  );
  const eventsOf = (fleet: string): FleetEvent[] =>
    told.map((s, i) => {
      const type = s.state === "applied" ? "upgrade.step_applied" : "upgrade.step_failed";
      const summary =
        s.state === "applied"
          ? `Data upgrade step ${s.version} applied: ${s.description}`
          : `Data upgrade step ${s.version} failed: ${s.error ?? "no error recorded"}`;
      return ownedEvent(
        ids[i],
        fleet,
        type,
        `upgrade:${s.version}`,
        summary,
        {
          version: s.version,
          description: s.description,
          run_id: s.runId,
          chunks: s.chunks,
          error: s.error,
          started_at: new Date(s.startedAt).toISOString(),
          finished_at: s.finishedAt ? new Date(s.finishedAt).toISOString() : null,
        },
        s.finishedAt ?? now,
      );
    });
  for (const part of told.length ? chunk(fleetIds, FLEETS_AT_ONCE) : []) {
    const results = await Promise.allSettled(part.map((f) => coordinatorOf(env, f).fleetEvents(eventsOf(f))));
    const failed = results.find((r) => r.status === "rejected");
    if (failed) {
      logLine("warn", "upgrade step events not taken; the next tick sends them again", {
        error: String((failed as PromiseRejectedResult).reason),
      });
      return { sent: 0 };
    }
  }
  await db
    .update(upgradeSteps)
    .set({ notifiedAt: now })
    .where(
      inArray(
        upgradeSteps.id,
        owed.map((s) => s.id),
      ),
    );
  return { sent: owed.length };
}
