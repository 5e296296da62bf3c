/**
 * The rollout's timers, all on its one alarm (src/objects/kit/scheduler.ts): outbox redelivery,
 * the targets' deadlines, the slow-server check, the batched projection, slot retries, and a
 * strategy's bake times, windows and analysis samples.
 */
import type { TimerHandler } from "../objects/kit/scheduler";
import { sampleDue } from "./analysis";
import { ANALYSIS_TIMER, PHASE_TIMER, WINDOW_TIMER } from "./phases";
import { DEADLINE_TIMER } from "./deadlines";
import { deadlinesDue, timedOut } from "./outcomes";
import type { RolloutParts } from "./parts";
import { checkSlow, SLOW_TIMER } from "./slow";
import { pump, retrySlots } from "./starting";
import { timerFired } from "./timer-memo";
import { afterChange, project, PROJECT_TIMER } from "./transitions";

const rolloutTimers = (p: RolloutParts): Record<string, TimerHandler> => ({
  outbox: () => p.outbox.flush(),
  [DEADLINE_TIMER]: () => (timerFired(p, DEADLINE_TIMER), deadlinesDue(p)),
  // A target's own timer, as rollouts stored by older code still have them.
  timeout: (_payload, name) => timedOut(p, name),
  [SLOW_TIMER]: () => (timerFired(p, SLOW_TIMER), checkSlow(p, p.clock())),
  [PROJECT_TIMER]: () => (timerFired(p, PROJECT_TIMER), project(p)),
  pump: () => retrySlots(p),
  // A strategy's bake time ended, or its window opened: the plan moves on.
  [PHASE_TIMER]: () => movePlan(p),
  [WINDOW_TIMER]: () => movePlan(p),
  [ANALYSIS_TIMER]: () => sampleDue(p),
});

/** The alarm: every due timer, by its handler; then whatever they enqueued is delivered. */
export async function fireTimers(p: RolloutParts) {
  await p.scheduler.fire(rolloutTimers(p));
  await p.outbox.flush();
}

function movePlan(p: RolloutParts) {
  p.store.transaction(() => {
    if (!p.store.load()) return;
    const now = p.clock();
    pump(p, now);
    afterChange(p);
    project(p);
  });
}
