/**
 * Slow-server detection: a target applying for longer than slow_factor × the median duration of
 * the pass's done targets is warned about once, in the event log and the summary. One timer
 * watches the oldest applying target not yet warned about, set for the moment it turns slow.
 */
import type { Target } from "./machine";
import type { RolloutParts } from "./parts";
import { cancelTimer, setAt } from "./timer-memo";
import { durationWords, isSlow, median } from "./progress";
import { rolloutWebhook } from "./webhook-events";

/** The slow-server check's timer. */
export const SLOW_TIMER = "slow";

export const medianMs = (p: RolloutParts) => median(p.store.doneDurations());

/** Warns about `t` (once) if it is slow: `ended` when it took `elapsed`, else while it takes it. */
export function warnIfSlow(p: RolloutParts, t: Target, elapsed: number, ended: boolean, now: number) {
  const { spec } = p.store.load()!;
  if (t.warned) return;
  const m = medianMs(p);
  if (!isSlow(elapsed, m, spec.slow_factor)) return;
  p.store.targets.markWarned(t);
  const message = `${t.hostname} ${ended ? "took" : "has taken"} ${durationWords(elapsed)}, over ${spec.slow_factor} x the median ${durationWords(m!)}`;
  const row = p.store.events.add(
    "warning.slow_server",
    t.server_id,
    { hostname: t.hostname, elapsed_ms: elapsed, median_ms: m, message },
    now,
  );
  rolloutWebhook(
    p,
    "rollout.slow_server",
    row,
    { server_id: t.server_id, hostname: t.hostname, elapsed_ms: elapsed, median_ms: m, message },
    now,
  );
}

/** One timer for the oldest applying target not yet warned about, at the moment it turns slow. */
export function scheduleSlowCheck(p: RolloutParts) {
  const { spec, core } = p.store.load()!;
  if (!spec.slow_factor) return;
  const m = medianMs(p);
  if (m === null) return;
  const oldest = p.store.targets.oldestUnwarned(core.pass);
  if (oldest === null) cancelTimer(p, SLOW_TIMER);
  else setAt(p, SLOW_TIMER, oldest + spec.slow_factor * m + 1);
}

/** The slow timer fired: warns about every target slow by now, then watches the next. */
export function checkSlow(p: RolloutParts, now: number) {
  const { spec, core } = p.store.load()!;
  const m = medianMs(p);
  if (!spec.slow_factor || m === null) return;
  const slow = p.store.targets.unwarnedSince(core.pass, now - spec.slow_factor * m);
  for (const t of slow) warnIfSlow(p, t, now - t.started_at!, false, now);
  // Long polls see the warnings.
  if (slow.length) p.store.putCore({ ...p.store.load()!.core, version: p.store.load()!.core.version + 1 });
  scheduleSlowCheck(p);
}
