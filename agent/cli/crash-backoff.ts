/**
 * The agent's own backoff from a crash loop. systemd restarts a crashed agent `RestartSec=` (5 s)
 * later; only from systemd 254 (`RestartSteps=`, `RestartMaxDelaySec=`; Debian 12 has 252) does
 * that delay grow, and then only to 2 min, as systemd never starts its count over while the unit
 * restarts by itself (the unit says more). So each run leaves a marker in the
 * state directory (`run.json`: this boot, when the run started, how many runs in a row crashed)
 * and removes it when it ends as it should; a start that finds one the same boot left knows the
 * last run crashed (a kill -9, the OOM killer, an uncaught error) and waits before it connects,
 * twice as long for each crash in a row, up to a cap. A run that stayed up `stable_s` after its
 * wait before it crashed starts the count over (counted from the start instead, a cap at or over
 * `stable_s` would make every run that crashed at once after its wait look stable, and the wait
 * would never grow past it); a marker from another boot is a power cut, not a crash.
 */
import type { Logger } from "./log.ts";
import type { StateDir } from "./state.ts";

const RUN_MARKER = "run.json";

export interface CrashBackoffPolicy {
  /** The wait after the first crash in a row (seconds); each further one doubles it. */
  base_s: number;
  /** No wait is longer. */
  cap_s: number;
  /** A run up this long before its crash counts as the first crash again. */
  stable_s: number;
}

interface RunMarker {
  boot_id: string;
  /**
   * When the run's up-time starts (ms since the epoch): the end of its wait, not the process's
   * start. The name is kept so a marker an older release left is still read.
   */
  started_at: number;
  /** How many runs in a row before this one crashed. */
  crashes: number;
}

const isMarker = (v: unknown): v is RunMarker =>
  typeof v === "object" &&
  v !== null &&
  typeof (v as RunMarker).boot_id === "string" &&
  Number.isSafeInteger((v as RunMarker).started_at) &&
  Number.isSafeInteger((v as RunMarker).crashes) &&
  (v as RunMarker).crashes >= 0;

/** How many runs in a row crashed before this one, from the marker the last run left (or not). */
export function crashesBefore(previous: unknown, bootId: string, policy: CrashBackoffPolicy, now: number): number {
  if (previous === null) return 0;
  // A marker that cannot be read was still left by a run that did not end as it should.
  if (!isMarker(previous)) return 1;
  if (previous.boot_id !== bootId) return 0;
  const upMs = now - previous.started_at;
  // A run killed during its wait, or a clock set back, makes the up-time negative: counted as a
  // quick crash, never as stable.
  return upMs >= 0 && upMs >= policy.stable_s * 1000 ? 1 : previous.crashes + 1;
}

/**
 * The wait before connecting after `crashes` crashes in a row: none after none; else
 * `base·2^(crashes-1)` capped, its second half jittered, so a fleet that crashed at once (the
 * same bad answer, the same bug) does not come back in step.
 */
export function crashDelayMs(crashes: number, policy: CrashBackoffPolicy, random = Math.random): number {
  if (crashes <= 0) return 0;
  const full = Math.min(policy.cap_s, policy.base_s * 2 ** Math.min(crashes - 1, 30)) * 1000;
  return Math.round(full / 2 + (random() * full) / 2);
}

/**
 * At the start of a run: counts the crashes before it, leaves this run's marker (durably: a crash
 * right after must still be seen), and says how long to wait. A state directory that cannot be
 * written (a full disk) costs the backoff, never the run.
 */
export function startRun(
  state: StateDir,
  bootId: string,
  policy: CrashBackoffPolicy,
  log: Logger,
  now = Date.now(),
  random = Math.random,
): { crashes: number; delayMs: number } {
  let previous: unknown = null;
  try {
    previous = state.read<unknown>(RUN_MARKER);
  } catch {
    previous = "unreadable";
  }
  const crashes = crashesBefore(previous, bootId, policy, now);
  const delayMs = crashDelayMs(crashes, policy, random);
  try {
    state.write(RUN_MARKER, { boot_id: bootId, started_at: now + delayMs, crashes } satisfies RunMarker);
  } catch (err) {
    log.warn(`${RUN_MARKER} could not be written; a crash of this run will not be backed off from`, {
      error: err instanceof Error ? err.message : String(err),
    });
  }
  return { crashes, delayMs };
}

/** At the end of a run that ended as it should (stopped, an order done, a refusal, a new build). */
export function endRun(state: StateDir, log: Logger) {
  try {
    state.remove(RUN_MARKER);
  } catch (err) {
    log.warn(`${RUN_MARKER} could not be removed; the next start will take this run for a crash`, {
      error: err instanceof Error ? err.message : String(err),
    });
  }
}
