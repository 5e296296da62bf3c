/**
 * The abort rule: when a rollout's failures stop it. A pure judgement over its counts, so the
 * thresholds are table-testable apart from the object that applies them.
 */
import type { RolloutTargetState } from "../domain/enums";

export interface AbortRule {
  max_failures?: number;
  max_failure_percent?: number;
  /** The percentage is judged only once this many targets ended (done, failed or timed out). */
  min_completed?: number;
}

/** Why the abort rule stops the rollout now, or null. Failures are failed and timed-out targets. */
export function abortReason(counts: Record<RolloutTargetState, number>, rule: AbortRule): string | null {
  const failures = counts.failed + counts.timed_out;
  const ended = failures + counts.done;
  if (rule.max_failures !== undefined && failures > rule.max_failures) {
    return `${failures} failed target(s) exceed max_failures ${rule.max_failures}`;
  }
  if (
    rule.max_failure_percent !== undefined &&
    ended > 0 &&
    ended >= (rule.min_completed ?? 1) &&
    failures * 100 > rule.max_failure_percent * ended
  ) {
    return `${failures} of ${ended} ended target(s) failed, over max_failure_percent ${rule.max_failure_percent}`;
  }
  return null;
}
