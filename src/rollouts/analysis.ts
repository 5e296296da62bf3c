/**
 * A strategy's analysis, driven from the Rollout object's alarm. Its timer asks for a sample: in
 * one storage turn the sample's number moves and the timer is set again a little past the
 * checks' longest timeout (so a sample lost with the object is asked for again); the checks run
 * in the background (./analysis-checks.ts: D1, Prometheus, HTTPS), and their answer comes back as
 * an event judged in a turn of its own — stored (value, threshold, time), then the analysis
 * passes, fails, or asks for the next sample. An answer for an earlier sample or phase changes
 * nothing. A failed analysis fails the rollout and, with `auto_rollback`, starts its rollback pass.
 */
import type { Core } from "./machine";
import { applyControl } from "./operator";
import { settle, type RolloutParts } from "./parts";
import { ANALYSIS_TIMER } from "./phases";
import { pump } from "./starting";
import { judgeAnalysis, stepOf } from "./strategy";
import type { SampleRequest, SampleResult } from "./analysis-checks";
import { afterChange, entered, project, skipQueued } from "./transitions";
import { rolloutWebhook } from "./webhook-events";

/** Past the longest check timeout (10 s): a sample whose answer did not come is asked for again. */
const SAMPLE_LOST_MS = 30_000;

/** The analysis timer: asks for the next sample (in the background), or nothing when no analysis runs. */
export async function sampleDue(p: RolloutParts) {
  const now = p.clock();
  const req = p.store.transaction((): SampleRequest | null => {
    const state = p.store.load();
    const plan = p.store.plan();
    const ph = p.store.phase();
    if (!state || !plan || !ph || state.core.pass !== 0 || state.core.state !== "running") return null;
    const step = stepOf(plan, ph.phase);
    if (step?.type !== "analysis" || ph.started_at === null || ph.passed) return null;
    const seq = ph.seq + 1;
    p.store.setPhase({ ...ph, seq });
    p.scheduler.schedule(ANALYSIS_TIMER, now + SAMPLE_LOST_MS);
    return {
      fleet: state.spec.fleet,
      phase: ph.phase,
      seq,
      checks: step.checks,
      released: p.store.targets.releasedBefore(ph.phase),
    };
  });
  await p.scheduler.arm();
  if (!req || !p.analyze) return;
  const analyze = p.analyze;
  p.background(
    analyze(req).then(
      (results) => sampleAnswered(p, req.phase, req.seq, results),
      // The timer set above asks again.
      (err) => console.error("rollout analysis sample failed", String(err)),
    ),
  );
}

/** A sample's answer: stored, then judged. */
async function sampleAnswered(p: RolloutParts, phase: number, seq: number, results: SampleResult[]) {
  const now = p.clock();
  const taken = p.store.transaction(() => {
    const state = p.store.load();
    const plan = p.store.plan();
    const ph = p.store.phase();
    if (!state || !plan || !ph || ph.phase !== phase || ph.seq !== seq || ph.passed) return false;
    const { core, spec } = state;
    if (core.pass !== 0 || (core.state !== "running" && core.state !== "paused")) return false;
    const step = stepOf(plan, phase);
    if (step?.type !== "analysis") return false;
    p.store.samples.add(phase, seq, now, results);
    const failures = step.checks.map(
      (_, i) => (ph.failures[i] ?? 0) + (results.some((r) => r.check === i && !r.ok) ? 1 : 0),
    );
    const verdict = judgeAnalysis(step, failures, results, now, ph.until ?? now);
    p.store.setPhase({ ...ph, failures });
    if (verdict.state === "failed") {
      let next: Core = {
        ...core,
        state: "failed",
        reason: verdict.reason,
        paused_from: null,
        ended_at: now,
        version: core.version + 1,
      };
      next = skipQueued(p, next, 0, "aborted", now);
      p.store.putCore(next);
      const failing = results.find((r) => !r.ok)!;
      const row = p.store.events.add(
        "analysis.failed",
        null,
        {
          phase,
          step: plan.phases[phase].step,
          check: failing.name,
          value: failing.value,
          threshold: failing.threshold,
          detail: failing.detail,
        },
        now,
      );
      rolloutWebhook(
        p,
        "rollout.analysis_failed",
        row,
        {
          message: verdict.reason,
          step: plan.phases[phase].step,
          check: failing.name,
          value: failing.value,
          threshold: failing.threshold,
          auto_rollback: plan.strategy.auto_rollback,
        },
        now,
      );
      entered(p, "failed", now);
      // A rollback applied moves the targets on and projects the rollout itself (applyControl).
      let moved = false;
      if (plan.strategy.auto_rollback) {
        moved = applyControl(p, "rollback", `rollout:${spec.id}`, now) === null;
        const back = p.store.events.add("rollout.auto_rollback", null, { reason: verdict.reason }, now);
        rolloutWebhook(
          p,
          "rollout.rolled_back",
          back,
          { message: `rolling back by itself: ${verdict.reason}`, reason: verdict.reason },
          now,
        );
      }
      if (!moved) {
        pump(p, now);
        afterChange(p);
        project(p);
      }
    } else if (verdict.state === "passed") {
      p.store.setPhase({ ...p.store.phase()!, passed: true });
      p.store.events.add("analysis.passed", null, { phase, step: plan.phases[phase].step, samples: seq }, now);
      p.scheduler.cancel(ANALYSIS_TIMER);
      pump(p, now);
      afterChange(p);
      project(p);
    } else {
      const until = ph.until ?? now;
      p.scheduler.schedule(ANALYSIS_TIMER, Math.min(now + step.interval_s * 1000, Math.max(until, now)));
    }
    return true;
  });
  if (taken) await settle(p, false);
}
