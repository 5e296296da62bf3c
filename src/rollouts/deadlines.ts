/**
 * When a target applying stops being waited for: its server timeout (the spec's, or
 * DEFAULT_SERVER_TIMEOUT_S for rollouts stored without one), and, for a target already applying
 * when the rollout was cancelled, CANCEL_GRACE_S after the cancel, whichever comes first. So a
 * cancelled rollout lets its (fleet, agent) go in bounded time however dead its hosts are.
 *
 * One timer (DEADLINE_TIMER) serves every target: it is set for the earliest deadline and, when it
 * fires, times out the targets whose deadline passed and is set for the next. A timer per target
 * put as many rows in the scheduler's table as targets in flight, and the scheduler reads that
 * whole table to arm the alarm after every turn (hundreds of rows read per target at concurrency
 * 500), besides a row written and deleted per target.
 */
import { CANCEL_GRACE_S, DEFAULT_SERVER_TIMEOUT_S } from "../domain/limits";
import type { RolloutSpec } from "./machine";
import type { RolloutParts } from "./parts";
import { cancelTimer, setAt, setNoLaterThan } from "./timer-memo";

export const DEADLINE_TIMER = "deadlines";

const serverTimeoutMs = (spec: Pick<RolloutSpec, "server_timeout_s">) =>
  (spec.server_timeout_s ?? DEFAULT_SERVER_TIMEOUT_S) * 1000;

/** When a target that started applying at `startedAt` is no longer waited for. */
function deadlineOf(p: RolloutParts, startedAt: number): number {
  const { spec, core } = p.store.load()!;
  const own = startedAt + serverTimeoutMs(spec);
  const recorded = p.store.cancels();
  const cancels = recorded.length || core.state !== "cancelled" || core.ended_at === null ? recorded : [core.ended_at];
  // The first cancel while it was applying: a rollback pass started after a cancel has its own time.
  const cancelledAt = cancels.find((at) => at >= startedAt);
  return cancelledAt === undefined ? own : Math.min(own, cancelledAt + CANCEL_GRACE_S * 1000);
}

/** A target started applying at `startedAt`: the timer fires no later than its deadline (no write when it is set earlier already). */
export function armTimeout(p: RolloutParts, startedAt: number) {
  setNoLaterThan(p, DEADLINE_TIMER, deadlineOf(p, startedAt));
}

/** The rollout was cancelled at `cancelledAt`: the targets in flight are waited for at most the grace from then. */
export function armCancelGrace(p: RolloutParts, cancelledAt: number) {
  if (!p.store.cancels().includes(cancelledAt)) p.store.addCancel(cancelledAt);
  armDeadlines(p);
}

/**
 * The timer set for exactly the earliest deadline of the targets applying, none when none is
 * (reads every target applying: only when the timer fires, at a cancel and at a re-drive).
 */
export function armDeadlines(p: RolloutParts) {
  let next: number | null = null;
  for (const a of p.store.targets.applying()) {
    const due = deadlineOf(p, a.started_at);
    if (next === null || due < next) next = due;
  }
  if (next === null) cancelTimer(p, DEADLINE_TIMER);
  else setAt(p, DEADLINE_TIMER, next);
}

/** The targets applying whose deadline has passed by `now`. */
export function pastDeadline(p: RolloutParts, now: number): { pass: number; server_id: string }[] {
  return p.store.targets.applying().filter((a) => deadlineOf(p, a.started_at) <= now);
}

/** Why a target's deadline ended it: the cancel's grace ran out, or its server timeout. */
export function timeoutReason(p: RolloutParts, startedAt: number | null, now: number): string {
  const { spec } = p.store.load()!;
  const ownDeadline = (startedAt ?? now) + serverTimeoutMs(spec);
  if (deadlineOf(p, startedAt ?? now) < ownDeadline && now < ownDeadline)
    return `no realizing report within ${CANCEL_GRACE_S} s of the cancel`;
  return `no realizing report within server_timeout_s (${serverTimeoutMs(spec) / 1000} s)`;
}
