/**
 * The ledger's timers, all on its one alarm (src/objects/kit/scheduler.ts), by name: outbox
 * redelivery, the quiet watch over an HTTP host (./quiet.ts), and the host that left the channel
 * and did not come back.
 */
import { quietEventOf } from "../fleetlock/ledger-side";
import type { TimerHandler } from "../objects/kit/scheduler";
import { project } from "./effects";
import type { LedgerParts } from "./parts";
import { LEFT_TIMER, QUIET_TIMER } from "./quiet";

/** `told`: the index (and the coordinator's gates) must hear of it once the fired timer is gone. */
const ledgerTimers = (p: LedgerParts, told: () => void): Record<string, TimerHandler> => ({
  outbox: () => p.outbox.flush(),
  // The HTTP host went quiet: the index gets its exact stale_at (./quiet.ts).
  [QUIET_TIMER]: (payload) => {
    const now = p.clock();
    if (!p.quiet.fired(now, payload)) return;
    told();
    project(p.outbox);
    // The server turned stale: its coordinator's fleet-health gates are told (after the index, same flush).
    const state = p.store.load();
    const health = state?.report ? quietEventOf(state.record, state.desired, state.report, now) : null;
    if (health) p.outbox.enqueue("server_health", health);
  },
  // The host that left the channel did not come back: stale now, in the index too (exact since it left).
  [LEFT_TIMER]: () => {
    const now = p.clock();
    if (!p.quiet.leftFired(now, p.hostConnected())) return;
    const state = p.store.load()!;
    const health = quietEventOf(state.record, state.desired, state.report!, now);
    if (health) {
      p.outbox.enqueue("server_health", health);
      told();
    }
  },
});

/** The alarm: every due timer, by its handler. */
export async function fireTimers(p: LedgerParts) {
  let flush = false;
  await p.scheduler.fire(ledgerTimers(p, () => (flush = true)));
  // Delivered once the fired timer is gone, so the projection is no longer leased.
  if (flush) await p.outbox.flush();
}
