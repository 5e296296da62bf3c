import type { CatalogFields } from "../domain/images";
/**
 * A rollout's state machine as pure functions over plain data (no storage, no clock: `now` is
 * passed in). The Rollout Durable Object loads a target and the rollout's core, applies one of
 * these and stores the result in the same synchronous turn, so every rule here is table-testable.
 */

import {
  ROLLOUT_STATES,
  ROLLOUT_TARGET_STATES,
  type RolloutControl,
  type RolloutState,
  type RolloutTargetState,
} from "../domain/enums";
import { abortReason, type AbortRule } from "./abort";

export { ROLLOUT_STATES, ROLLOUT_TARGET_STATES as TARGET_STATES };
export type { RolloutState };
export type TargetState = RolloutTargetState;
export type Control = RolloutControl;

/** States in which a rollout holds its (fleet, agent): only one such rollout at a time. */
export const ACTIVE_STATES = ["running", "paused", "rolling_back"] as const satisfies readonly RolloutState[];

export interface RolloutSpec {
  id: string;
  fleet: string;
  agent: string;
  image: string;
  version: string;
  /** The catalog image, as resolved when the rollout was created; null or absent: a free-form image. */
  catalog?: CatalogFields | null;
  concurrency: number;
  server_timeout_s: number | null;
  slow_factor: number | null;
  abort: AbortRule;
  update_channel: boolean;
  reboot_slot: boolean;
  /**
   * The fleet had a disruption budget when the rollout was created: each target asks the fleet's
   * coordinator for its unit before it is applied. Absent on rollouts created before budgets.
   */
  budget?: boolean;
  /**
   * Whose strategy the rollout follows: the request's, the fleet's default for the agent (a
   * fleet spec's), or none (one wave). Absent on rollouts created before defaults: the request's
   * when it has a plan.
   */
  strategy_source?: StrategySource;
  created_by: string;
  created_at: number;
}

export const STRATEGY_SOURCES = ["request", "fleet_default", "none"] as const;
export type StrategySource = (typeof STRATEGY_SOURCES)[number];

type SlotPhase = "none" | "requested" | "held";

export interface Target {
  pass: number;
  server_id: string;
  seq: number;
  hostname: string;
  reboot_group: string;
  state: TargetState;
  /** What this pass writes. */
  image: string;
  version: string;
  /** What the server's desired config gave the agent before this pass wrote (rollback goes back to it). */
  from_image: string | null;
  from_version: string | null;
  /** The generation this pass wrote; done only when a report realizes it. */
  generation: number | null;
  slot: SlotPhase;
  started_at: number | null;
  ended_at: number | null;
  reason: string | null;
  warned: boolean;
  /**
   * A rollback target that was no target of the forward pass: its server took the rollout's image
   * from the fleet's channel while the rollout held it (absent: false).
   */
  via_channel?: boolean;
}

export type Counts = Record<TargetState, number>;
export const zeroCounts = (): Counts => ({
  queued: 0,
  waiting_budget: 0,
  applying: 0,
  done: 0,
  failed: 0,
  timed_out: 0,
  skipped: 0,
});

export interface Core {
  state: RolloutState;
  /** 0: the forward pass; 1: the rollback pass. */
  pass: number;
  /** What a paused rollout resumes to. */
  paused_from: "running" | "rolling_back" | null;
  /** Targets of the current pass by state. */
  counts: Counts;
  /** Targets of the previous pass still applying (they finish during a rollback). */
  prev_applying: number;
  /** Queued targets whose reboot-slot request is under way (they count toward concurrency). */
  slot_requests: number;
  reason: string | null;
  /**
   * The rollback pass still waits to learn which servers took the rollout's image from the fleet's
   * channel (they join the pass as targets): it does not end before (absent: false).
   */
  channel_lookup?: boolean;
  /** Bumped by every change; long polls wait for it to move. */
  version: number;
  ended_at: number | null;
}

export const newCore = (): Core => ({
  state: "running",
  pass: 0,
  paused_from: null,
  counts: zeroCounts(),
  prev_applying: 0,
  slot_requests: 0,
  reason: null,
  version: 1,
  ended_at: null,
});

/** Running its rollback pass, or paused in it. */
export const rollingBack = (core: Core) =>
  core.state === "rolling_back" || (core.state === "paused" && core.paused_from === "rolling_back");

export const driving = (s: RolloutState) => s === "running" || s === "rolling_back";
export const isTerminal = (s: RolloutState) => !(ACTIVE_STATES as readonly string[]).includes(s);
export const isEnded = (t: TargetState) => t !== "queued" && t !== "waiting_budget" && t !== "applying";
/** Not started yet: queued, or waiting for the fleet's disruption budget. */
const notStarted = (t: TargetState) => t === "queued" || t === "waiting_budget";

/** How many more targets may start now: never more than `concurrency` in flight, whatever the races. */
export function startable(core: Core, spec: Pick<RolloutSpec, "concurrency">): number {
  if (!driving(core.state)) return 0;
  return Math.max(0, spec.concurrency - core.counts.applying - core.prev_applying - core.slot_requests);
}

/** Nothing of this rollout is in flight any more: a terminal rollout then lets its (fleet, agent) go. */
export const quiescent = (core: Core) =>
  isTerminal(core.state) && core.counts.applying === 0 && core.prev_applying === 0 && core.slot_requests === 0;

// ---- targets ----

export type TargetEvent =
  | { type: "slot_requested" }
  | { type: "slot_refused" }
  /** The coordinator refused its slot request for the fleet's disruption budget. */
  | { type: "budget_wait"; reason: string }
  /** The coordinator said the budget freed: it asks again. */
  | { type: "budget_freed" }
  | { type: "start"; at: number }
  | { type: "applied"; generation: number; from_image: string | null; from_version: string | null }
  /**
   * With a generation: that write was overtaken after it landed (an operator's desired config
   * took the agent off its image), so the target it applies at that generation ends skipped too.
   */
  | { type: "skip"; reason: string; at: number; generation?: number }
  | { type: "realized"; generation: number; at: number }
  | { type: "failed"; generation: number; message: string; at: number }
  | { type: "timeout"; at: number; reason?: string }
  | { type: "removed"; at: number }
  | { type: "fail"; reason: string; at: number };

/**
 * One target's transition, or null when the event does not apply to it (a duplicate, a late or
 * reordered event, an event of another generation): such events change nothing.
 */
export function stepTarget(t: Target, e: TargetEvent): Target | null {
  const end = (state: TargetState, at: number, reason: string | null): Target => ({
    ...t,
    state,
    ended_at: at,
    reason,
  });
  switch (e.type) {
    case "slot_requested":
      return t.state === "queued" && t.slot === "none" ? { ...t, slot: "requested" } : null;
    case "slot_refused":
      return t.state === "queued" && t.slot === "requested" ? { ...t, slot: "none" } : null;
    case "budget_wait":
      return t.state === "queued" && t.slot === "requested"
        ? { ...t, state: "waiting_budget", slot: "none", reason: e.reason }
        : null;
    case "budget_freed":
      return t.state === "waiting_budget" ? { ...t, state: "queued", reason: null } : null;
    case "start":
      if (t.state !== "queued") return null;
      return { ...t, state: "applying", started_at: e.at, slot: t.slot === "requested" ? "held" : t.slot };
    case "applied":
      if (t.state === "applying" && t.generation === null) {
        return { ...t, generation: e.generation, from_image: e.from_image, from_version: e.from_version };
      }
      // The ledger's outcome may arrive before the write's answer: the answer then only adds
      // what the image was before (rollback needs it).
      if (t.generation === e.generation && t.from_image === null && e.from_image !== null) {
        return { ...t, from_image: e.from_image, from_version: e.from_version };
      }
      return null;
    case "skip":
      // Only before anything was written, or for the very generation written (the ledger knows it
      // will never run): a target whose generation is out otherwise finishes as it ends.
      if (notStarted(t.state) || (t.state === "applying" && t.generation === null))
        return end("skipped", e.at, e.reason);
      if (t.state === "applying" && e.generation !== undefined && t.generation === e.generation)
        return end("skipped", e.at, e.reason);
      return null;
    case "realized":
      return t.state === "applying" && t.generation === e.generation ? end("done", e.at, null) : null;
    case "failed":
      return t.state === "applying" && t.generation === e.generation ? end("failed", e.at, e.message) : null;
    case "timeout":
      return t.state === "applying"
        ? end("timed_out", e.at, e.reason ?? "no realizing report within server_timeout_s")
        : null;
    case "removed":
      return notStarted(t.state) || t.state === "applying" ? end("skipped", e.at, "removed") : null;
    case "fail":
      return notStarted(t.state) || t.state === "applying" ? end("failed", e.at, e.reason) : null;
  }
}

export interface Outcome {
  core: Core;
  /** Queued targets of the current pass become skipped with this reason. */
  skipQueued?: string;
  /** The rollout reached this state on this change (audit, channel). */
  entered?: RolloutState;
}

/**
 * The core after one target changed from `before` to `after`: counts, then the abort rule, then
 * completion. A target of an earlier pass only frees its place.
 */
export function account(
  core: Core,
  spec: Pick<RolloutSpec, "abort">,
  before: Target,
  after: Target,
  now: number,
): Outcome {
  let next: Core = { ...core, counts: { ...core.counts }, version: core.version + 1 };
  if (before.slot === "requested" && after.slot !== "requested") next.slot_requests--;
  if (before.slot !== "requested" && after.slot === "requested") next.slot_requests++;
  if (after.pass === core.pass) {
    next.counts[before.state]--;
    next.counts[after.state]++;
  } else if (before.state === "applying" && after.state !== "applying") {
    next.prev_applying--;
  }
  let skipQueued: string | undefined;
  let entered: RolloutState | undefined;
  if (driving(next.state) || next.state === "paused") {
    const reason = after.pass === core.pass && isEnded(after.state) ? abortReason(next.counts, spec.abort) : null;
    if (reason) {
      next = { ...next, state: "failed", reason, paused_from: null, ended_at: now };
      skipQueued = "aborted";
      entered = "failed";
    }
  }
  const done = finish(next, now);
  if (done.entered) return { core: done.core, skipQueued, entered: done.entered };
  return { core: next, skipQueued, entered };
}

/** A driving rollout with nothing queued or in flight has finished its pass. */
export function finish(core: Core, now: number): { core: Core; entered?: RolloutState } {
  if (!driving(core.state)) return { core };
  if (
    core.counts.queued > 0 ||
    core.counts.waiting_budget > 0 ||
    core.counts.applying > 0 ||
    core.prev_applying > 0 ||
    core.slot_requests > 0 ||
    core.channel_lookup === true
  )
    return { core };
  const state: RolloutState = core.state === "running" ? "succeeded" : "rolled_back";
  return { core: { ...core, state, ended_at: now, version: core.version + 1 }, entered: state };
}

/**
 * The servers that took the rollout's image from the channel are known: `n` of them joined the
 * rollback pass, queued (none unless it is still rolling back). The lookup is over: the pass may end.
 */
export function channelTargetsFound(core: Core, n: number, now: number): { core: Core; entered?: RolloutState } {
  const { channel_lookup: _done, ...rest } = core;
  return finish(
    { ...rest, counts: { ...core.counts, queued: core.counts.queued + n }, version: core.version + 1 },
    now,
  );
}

/** After a bulk skip of queued (and budget-waiting) targets (cancel, abort, rollback), the counts move with it. */
export function skippedQueued(core: Core, n: number, waiting = 0): Core {
  const counts = {
    ...core.counts,
    queued: core.counts.queued - n,
    waiting_budget: core.counts.waiting_budget - waiting,
    skipped: core.counts.skipped + n + waiting,
  };
  return { ...core, counts };
}
