/**
 * Builds the rollout's parts (./parts.ts) and its waiters' room from the object's constructor
 * arguments and wires them to each other, once: every part gets what it calls in its constructor,
 * and nothing is set on a part afterwards. The parts call each other only once built (closures
 * over `parts` run after this returns).
 */
import { getDb } from "../db/client";
import type { Env } from "../env";
import { Outbox } from "../objects/kit/outbox";
import { Scheduler } from "../objects/kit/scheduler";
import { socketRoom, type SocketRoom } from "../objects/kit/sockets";
import { takeSample } from "./analysis-checks";
import { CALL_CONCURRENCY, rolloutEffects } from "./effects";
import type { EffectKind, RolloutParts } from "./parts";
import { RolloutStore } from "./store";
import { wakeSummaryWaits } from "./waits";

/** `env` is read at each use, not captured: the runtime's (and a test's) bindings as they are then. */
export function assemble(
  ctx: DurableObjectState,
  env: () => Env,
  clock: () => number,
): { parts: RolloutParts; room: SocketRoom } {
  const room = socketRoom(ctx);
  // Wakes go out once the writing turn is over (a transaction's several writes are one wake).
  let wakePending = false;
  const coreMoved = () => {
    if (wakePending) return;
    wakePending = true;
    queueMicrotask(() => {
      wakePending = false;
      wakeSummaryWaits(parts, room);
    });
  };
  const store = new RolloutStore(ctx.storage, coreMoved);
  // The kit learns its tables exist, and where its timers stand, only once the store's turn
  // committed: a table created in a turn that rolled back is gone again.
  const onCommit = (fn: () => void) => store.onCommit(fn);
  const scheduler = new Scheduler(ctx.storage, onCommit);
  const effects = rolloutEffects(env, () => parts);
  const outbox = new Outbox<EffectKind>(
    ctx.storage,
    scheduler,
    effects,
    () => getDb(env().DB),
    CALL_CONCURRENCY,
    onCommit,
  );
  const parts: RolloutParts = {
    store,
    outbox,
    scheduler,
    clock,
    background: (work) => ctx.waitUntil(work),
    analyze: (req) => takeSample(getDb(env().DB), (u, i) => fetch(u, i), req, clock()),
  };
  return { parts, room };
}
