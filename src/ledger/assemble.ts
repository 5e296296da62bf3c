/**
 * Builds the ledger's parts (./parts.ts) and its sockets from the object's constructor arguments
 * and wires them to each other, once: every part gets what it calls in its constructor, and
 * nothing is set on a part afterwards. The parts call each other only once built (closures over
 * `parts` and `sockets` run after this returns).
 */
import { noticeCovered, type NoticeInput } from "../notices/notices";
import { getDb } from "../db/client";
import type { Env } from "../env";
import { DriftWatch } from "../fleetlock/ledger-side";
import { Outbox } from "../objects/kit/outbox";
import { Scheduler } from "../objects/kit/scheduler";
import { socketRoom } from "../objects/kit/sockets";
import { cleanupDelivered } from "./decommission";
import { ledgerEffects } from "./effects";
import type { LedgerParts } from "./parts";
import { QuietWatch } from "./quiet";
import { LedgerSockets } from "./sockets";
import { LedgerStore } from "./store";

/**
 * Calls under way at once. Each receiver has a lane (one call at a time, in enqueue order), so
 * this bounds how many receivers are called at once: a few, as there are few of them.
 */
const CALL_SLOTS = 4;

/** `env` is read at each use, not captured: the runtime's (and a test's) bindings as they are then. */
export function assemble(
  ctx: DurableObjectState,
  env: () => Env,
  clock: () => number,
): { parts: LedgerParts; sockets: LedgerSockets } {
  const db = () => getDb(env().DB);
  // Every store write wakes what waits on the ledger and pushes to its host (./sockets.ts).
  const store = new LedgerStore(ctx.storage, () => sockets.changed());
  // Timers learnt only once the store's turn committed (a rolled-back one teaches the scheduler nothing).
  const scheduler = new Scheduler(ctx.storage, (fn) => store.onCommit(fn));
  const quiet = new QuietWatch(scheduler, store);
  const hostConnected = () => sockets.hostConnected();
  const leased = () => hostConnected() || quiet.watching();
  const driftWatch = new DriftWatch();
  const effects = ledgerEffects({
    env,
    db,
    clock,
    store,
    cleaned: (step) => cleanupDelivered(parts, step),
    leased,
    driftWatch,
    // One pending console notice per ledger (keyed): the newest stands for every change before it.
    // None stored when another owner's trailing notice, sent after this change, already stands for
    // it (a busy fleet: most of its ledgers' notices): its delivery would only drop it, and storing
    // and deleting it costs three of the ledger's storage rows.
    shown: (fleet, server) => {
      const notice: NoticeInput = { fleet, kind: "server", ids: [server], from: `server:${server}` };
      if (!noticeCovered(notice)) outbox.enqueue("feed", notice, { key: "feed" });
    },
  });
  // Calls to the ledger's receivers (its coordinator, a rollout, the fleet's console feed) in a
  // lane each: one that hangs holds its own lane, up to its deadline, not every other call.
  const outbox = new Outbox(ctx.storage, scheduler, effects, db, CALL_SLOTS, (fn) => store.onCommit(fn));
  const parts: LedgerParts = { store, outbox, scheduler, clock, hostConnected, leased, quiet, driftWatch };
  const sockets = new LedgerSockets(parts, socketRoom(ctx));
  return { parts, sockets };
}
