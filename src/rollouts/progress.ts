/**
 * A rollout's pace as pure functions: the median duration of the targets done so far, which of
 * those in flight are slow against it, and when the pass will end at that pace.
 */
import { isTerminal, type Core } from "./machine";

export function median(sortedMs: number[]): number | null {
  const n = sortedMs.length;
  if (n === 0) return null;
  return n % 2 ? sortedMs[(n - 1) / 2] : (sortedMs[n / 2 - 1] + sortedMs[n / 2]) / 2;
}

/** A server is slow when it takes longer than `factor` × the median of those done so far. */
export const isSlow = (elapsedMs: number, medianMs: number | null, factor: number | null) =>
  factor !== null && medianMs !== null && medianMs > 0 && elapsedMs > factor * medianMs;

/** Seconds until the pass ends at the median pace so far, `concurrency` at a time. */
export function etaSeconds(core: Core, concurrency: number, medianMs: number | null): number | null {
  if (isTerminal(core.state)) return 0;
  if (medianMs === null) return null;
  const remaining = core.counts.queued + core.counts.applying;
  return Math.round((Math.ceil(remaining / concurrency) * medianMs) / 1000);
}

/**
 * A duration in words for the warnings: "372 ms" below a second and "3.7 s" below ten, whole
 * seconds above (in whole seconds, 372 ms against a 120 ms median read "0 s over 3 x the median 0 s").
 */
export function durationWords(ms: number): string {
  const x = Math.max(0, ms);
  if (x < 999.5) return `${Math.round(x)} ms`;
  if (x < 9_950) return `${(Math.round(x / 100) / 10).toFixed(1)} s`;
  return `${Math.round(x / 1000)} s`;
}

/** Where `ms` goes in an ascending list, after any equal values (keeps the list sorted). */
export function sortedInsert(sorted: number[], ms: number) {
  let lo = 0;
  let hi = sorted.length;
  while (lo < hi) {
    const mid = (lo + hi) >> 1;
    if (sorted[mid] <= ms) lo = mid + 1;
    else hi = mid;
  }
  sorted.splice(lo, 0, ms);
}
