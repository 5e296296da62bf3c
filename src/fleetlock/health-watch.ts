/**
 * Whether the fleet's coordinator wants its ledgers' drift-only health events (./ledger-side.ts):
 * only a webhook asking for `server.drifted` uses one. The coordinator publishes it in D1
 * (`fleets.health_watch`), where each ledger reads it in its projection's batch, so a host
 * flapping between drifted and realized costs the fleet's one coordinator nothing unless
 * somebody listens.
 *
 * A webhook created asking for `server.drifted` is published in D1 before the webhook exists
 * (`watchBeforeCreating`): should D1 refuse it, the creation is refused (nothing created), rather
 * than answered while ledgers still read 0 and skip the drifts it wants until the outbox's retry
 * lands. A 1 written for a creation that then fails or dies costs calls, never a drift. A spec's
 * webhooks are applied the same way (refused, its task fails and the cron runs it again). Turning it off
 * is lazy: 1 (the column's default, also for fleets from before) stays until the coordinator
 * hears a drift-only event no webhook wants, which costs one more call than needed, never one less.
 */
import { eq, and, ne } from "drizzle-orm";
import type { Db } from "../db/client";
import { fleets } from "../db/schema";
import type { WebhookStore } from "../webhooks/store";

export interface HealthWatchPayload {
  fleet_id: string;
  watch: boolean;
}

/** Whether any of the fleet's webhooks asks for `server.drifted`. */
const driftWatched = (hooks: WebhookStore) => hooks.all().some((w) => w.events.includes("server.drifted"));

/** The value last enqueued per coordinator (memory: after an eviction it is published once more). */
const published = new WeakMap<object, boolean>();

/**
 * Enqueues the fleet's watch for D1 if it differs from what this object last published (keyed:
 * the newest value wins). The caller's flush delivers it; an operator's change awaits that.
 */
export function publishHealthWatch(
  // The coordinator's parts, narrowed (./effects.ts imports this module's statement).
  o: {
    outbox: { enqueue(kind: "health_watch", payload: HealthWatchPayload, opts: { key: string }): void };
    webhookStore: WebhookStore;
  },
  fleetId: string | undefined,
): boolean {
  if (!fleetId) return false;
  const watch = driftWatched(o.webhookStore);
  if (published.get(o.webhookStore) === watch) return false;
  o.outbox.enqueue("health_watch", { fleet_id: fleetId, watch } satisfies HealthWatchPayload, { key: "health_watch" });
  published.set(o.webhookStore, watch);
  return true;
}

/** The D1 write: the row is written only when the value changes. */
export const healthWatchStatement = (db: Db, p: HealthWatchPayload) => {
  const value = p.watch ? 1 : 0;
  return db
    .update(fleets)
    .set({ healthWatch: value })
    .where(and(eq(fleets.id, p.fleet_id), ne(fleets.healthWatch, value)));
};

/**
 * Before a webhook asking for `server.drifted` is created: the fleet's watch is written to D1 now,
 * awaited; false when D1 refused it (the caller creates nothing). Other webhooks need nothing.
 */
export async function watchBeforeCreating(db: Db, fleetId: string, events: readonly string[]): Promise<boolean> {
  if (!events.includes("server.drifted")) return true;
  try {
    await db.batch([healthWatchStatement(db, { fleet_id: fleetId, watch: true })]);
    return true;
  } catch (err) {
    console.warn(JSON.stringify({ msg: "health watch not published; webhook not created", error: String(err) }));
    return false;
  }
}
