/**
 * The rollout's timers, all on its one alarm (src/objects/kit/scheduler.ts): outbox redelivery,
 * per-target timeouts, the slow-server check, the batched projection and slot retries.
 */
import type { TimerHandler } from "../objects/kit/scheduler";
import { timedOut } from "./outcomes";
import type { RolloutParts } from "./parts";
import { checkSlow } from "./slow";
import { retrySlots } from "./starting";
import { project } from "./transitions";

const rolloutTimers = (p: RolloutParts): Record<string, TimerHandler> => ({
  outbox: () => p.outbox.flush(),
  timeout: (_payload, name) => timedOut(p, name),
  slow: () => checkSlow(p, p.clock()),
  project: () => project(p),
  pump: () => retrySlots(p),
});

/** The alarm: every due timer, by its handler; then whatever they enqueued is delivered. */
export async function fireTimers(p: RolloutParts) {
  await p.scheduler.fire(rolloutTimers(p));
  await p.outbox.flush();
}
