/**
 * Timers set through what this object remembers of them: a target's start and end each asked for
 * the same timers again (the batched projection, the deadline timer, the slow-server check), and
 * each ask was a statement on the scheduler's table that moved nothing. The memory is the store's
 * (`timersSet`): an upper bound on the stored due time, forgotten with an undone turn and when
 * the timer fires (./timers.ts), and empty after a restart, so an ask it cannot vouch for reaches
 * the scheduler as before.
 */
import type { RolloutParts } from "./parts";

/** The timer fires no later than `dueAt` (the scheduler's noLaterThan), unless it is known to already. */
export function setNoLaterThan(p: RolloutParts, name: string, dueAt: number) {
  const due = Math.floor(dueAt);
  const known = p.store.timersSet.get(name);
  if (known !== undefined && known !== null && known <= due) return;
  p.scheduler.schedule(name, due, null, { noLaterThan: true });
  p.store.timersSet.set(name, known === undefined || known === null ? due : Math.min(known, due));
}

/** The timer fires at exactly `dueAt`, unless it is known to be set so already. */
export function setAt(p: RolloutParts, name: string, dueAt: number) {
  const due = Math.floor(dueAt);
  if (p.store.timersSet.get(name) === due) return;
  p.scheduler.schedule(name, due);
  p.store.timersSet.set(name, due);
}

/** No such timer, unless it is known to be gone already. */
export function cancelTimer(p: RolloutParts, name: string) {
  if (p.store.timersSet.get(name) === null) return;
  p.scheduler.cancel(name);
  p.store.timersSet.set(name, null);
}

/** The timer fired: its row is deleted or moved by the scheduler, so what was known of it no longer holds. */
export function timerFired(p: RolloutParts, name: string) {
  p.store.timersSet.delete(name);
}
