/** Retry timing for host agents: capped exponential backoff with full jitter, and Retry-After. */

export interface BackoffPolicy {
  /** First delay ceiling, in ms. */
  baseMs: number;
  /** No delay ever exceeds this, in ms. */
  capMs: number;
}

export const DEFAULT_BACKOFF: BackoffPolicy = { baseMs: 1_000, capMs: 60_000 };

/**
 * Full jitter ("Exponential Backoff and Jitter", AWS): uniform in [0, min(cap, base·2^(n-1))].
 * A fleet that lost the control plane at the same moment then comes back spread out, not in
 * synchronized waves. `attempt` counts consecutive failures from 1.
 */
export function backoffDelay(attempt: number, policy: BackoffPolicy = DEFAULT_BACKOFF, random = Math.random): number {
  const exp = Math.min(policy.capMs, policy.baseMs * 2 ** Math.min(Math.max(attempt, 1) - 1, 30));
  return Math.floor(random() * exp);
}

/**
 * A Retry-After header as ms from `now`: delta-seconds or an HTTP date. Null when absent or
 * unreadable; never negative; capped so a confused server cannot park a host for days.
 */
export function retryAfterMs(header: string | null | undefined, now = Date.now(), capMs = 15 * 60_000): number | null {
  if (!header) return null;
  const trimmed = header.trim();
  let ms: number;
  if (/^\d+$/.test(trimmed)) ms = Number(trimmed) * 1000;
  else {
    const at = Date.parse(trimmed);
    if (Number.isNaN(at)) return null;
    ms = at - now;
  }
  return Math.min(Math.max(ms, 0), capMs);
}
