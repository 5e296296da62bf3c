/**
 * A strategy's plan, driven (./strategy.ts decides; this applies, in the caller's storage turn):
 * which phase's targets may start now, and moving from one phase to the next — a release phase
 * once every target of it ended, a timed pause once its bake time passed, a pause until resumed
 * once resumed, an analysis once its checks held through their bake time (./analysis.ts). The
 * rollback pass and rollouts without a strategy are not held by any of it.
 */
import type { BlockedBy } from "../model/blocked-by";
import type { RolloutParts } from "./parts";
import type { PhaseState } from "./store";
import { nextOpening } from "../model/windows";
import { stepOf, type Plan } from "./strategy";
import { audit, entered } from "./transitions";
import { rolloutWebhook } from "./webhook-events";

export const PHASE_TIMER = "phase";
export const ANALYSIS_TIMER = "analysis";
export const WINDOW_TIMER = "window";

/**
 * The highest phase whose queued targets may start now: every phase without a strategy or in
 * the rollback pass (null); the current phase if it releases and a window (if any) is open;
 * else none (-1). A closed window arms a timer for its opening.
 */
export function releasable(p: RolloutParts, now: number): number | null {
  const plan = p.store.plan();
  const { core } = p.store.load()!;
  if (!plan || core.pass !== 0) return null;
  const ph = p.store.phase()!;
  if (plan.phases[ph.phase]?.kind !== "release" || ph.started_at === null) return -1;
  const opens = nextOpening(plan.strategy.windows ?? [], now);
  if (opens !== null) {
    p.scheduler.schedule(WINDOW_TIMER, opens, null, { noLaterThan: true });
    return -1;
  }
  return ph.phase;
}

/** Moves through the plan as far as it may go now. */
export function progress(p: RolloutParts, now: number) {
  const plan = p.store.plan();
  if (!plan) return;
  for (let guard = 0; guard <= plan.phases.length + 1; guard++) {
    const { core } = p.store.load()!;
    if (core.pass !== 0 || core.state !== "running") return;
    const ph = p.store.phase()!;
    const phase = plan.phases[ph.phase];
    if (!phase) return;
    if (ph.started_at === null) {
      enter(p, plan, ph, now);
      continue;
    }
    if (!phaseDone(p, plan, ph, now)) return;
    if (ph.phase + 1 >= plan.phases.length) return;
    p.store.setPhase({ phase: ph.phase + 1, started_at: null, until: null, seq: 0, failures: [] });
  }
}

function phaseDone(p: RolloutParts, plan: Plan, ph: PhaseState, now: number): boolean {
  const phase = plan.phases[ph.phase];
  switch (phase.kind) {
    case "release":
      return p.store.targets.openInPhase(ph.phase) === 0;
    case "pause":
      // A pause until resumed was resumed once the rollout runs again.
      if (ph.awaiting_resume) return true;
      if (ph.until !== null && now < ph.until) {
        p.scheduler.schedule(PHASE_TIMER, ph.until, null, { noLaterThan: true });
        return false;
      }
      return true;
    case "analysis":
      if (ph.passed) return true;
      // Resumed after an operator's pause: sampling goes on.
      if (p.scheduler.dueAt(ANALYSIS_TIMER) === null)
        p.scheduler.schedule(ANALYSIS_TIMER, now, null, { noLaterThan: true });
      return false;
  }
}

/**
 * A phase begins: a pause or an analysis sets its bake time; logged, and sent to webhooks with
 * what the rollout now waits for (blocked_by), if anything.
 */
function enter(p: RolloutParts, plan: Plan, ph: PhaseState, now: number) {
  const phase = plan.phases[ph.phase];
  const step = stepOf(plan, ph.phase);
  const iso = (ms: number) => new Date(ms).toISOString();
  let blocked: BlockedBy[] = [];
  let pausedNow = false;
  if (step?.type === "pause" && step.duration_s === undefined) {
    // Until an operator resumes it: the rollout is paused, by its strategy.
    p.store.setPhase({ ...ph, started_at: now, awaiting_resume: true });
    const { core } = p.store.load()!;
    p.store.putCore({ ...core, state: "paused", paused_from: "running", version: core.version + 1 });
    p.store.setPausedBy({ by: null, at: now });
    pausedNow = true;
    blocked = [
      {
        kind: "paused",
        message: `paused by its strategy (step ${phase.step}): resume it to go on`,
        since: iso(now),
      },
    ];
  } else if (step?.type === "pause") {
    const until = now + step.duration_s! * 1000;
    p.store.setPhase({ ...ph, started_at: now, until });
    p.scheduler.schedule(PHASE_TIMER, until, null, { noLaterThan: true });
    blocked = [{ kind: "bake", message: `pause step ${phase.step} bakes until ${iso(until)}`, until: iso(until) }];
  } else if (step?.type === "analysis") {
    const until = now + step.bake_s * 1000;
    p.store.setPhase({ ...ph, started_at: now, until, failures: step.checks.map(() => 0) });
    p.scheduler.schedule(ANALYSIS_TIMER, now, null, { noLaterThan: true });
    blocked = [
      {
        kind: "analysis",
        message: `analysis (step ${phase.step}) is taking its first sample`,
        since: iso(now),
        until: iso(until),
      },
    ];
  } else {
    p.store.setPhase({ ...ph, started_at: now });
  }
  const row = p.store.events.add(
    "step.started",
    null,
    { phase: ph.phase, step: phase.step, kind: phase.kind, title: phase.title, servers: phase.size },
    now,
  );
  rolloutWebhook(
    p,
    "rollout.step_started",
    row,
    {
      message: `step ${phase.step} started: ${phase.title}`,
      phase: ph.phase,
      step: phase.step,
      kind: phase.kind,
      title: phase.title,
      blocked_by: blocked,
    },
    now,
  );
  if (pausedNow) {
    const { spec } = p.store.load()!;
    audit(p, {
      actor: `rollout:${spec.id}`,
      action: "rollout.pause",
      details: { from: "running", to: "paused", step: phase.step },
    });
    entered(p, "paused", now);
  }
}
