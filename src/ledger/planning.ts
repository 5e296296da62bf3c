/**
 * The planner's write into a ledger (docs/operator-guide.md). The step itself is pure, in
 * src/planner/ledger-side.ts; this applies it to the store and outbox.
 */
import { fixHoldAnnounced } from "../fleetlock/ledger-side";
import type { FleetPlanInputs } from "../planner/plan";
import { fail, type Result } from "../objects/kit/result";
import { planStep, type PlanState } from "../planner/ledger-side";
import { audit, project } from "./effects";
import type { LedgerParts } from "./parts";
import { noteDesiredChange } from "./rollout-marks";

export type PlanOutcome = "issued" | "reissued" | "unchanged" | "pinned" | "older_inputs" | "not_running";

/**
 * The fleet's plan inputs as of intent revision `inputs.rev`. A new generation is issued only when
 * the plan differs from the current agents and the server is planned (not pinned); older inputs
 * than the newest seen change nothing. With `release`, a pinned server goes back to planning
 * first. `wrote`: something was stored (and so is to be delivered before the answer).
 */
export function applyPlan(
  d: LedgerParts,
  inputs: FleetPlanInputs,
  meta: {
    actor: string;
    reason: string;
    release?: boolean;
    reissue?: boolean;
    roles?: string[];
    audited?: boolean;
    /**
     * A drift fix's write under a disruption-budget hold: it must commit by then. Past it the
     * coordinator may ask this ledger whether the fix was written and free the hold on its answer,
     * so a later commit could disrupt the server with no unit held: refused, nothing written.
     */
    deadline?: number;
  },
): Result<{ outcome: PlanOutcome; wrote: boolean }> {
  if (meta.deadline !== undefined && d.clock() > meta.deadline)
    return fail(
      "reservation_expired",
      "the disruption budget's unit held for this fix ran out before the write reached the server's ledger; fix again",
    );
  const state = d.store.load();
  if (!state) return fail("not_found", "server does not exist");
  if (state.record.state === "removed") return fail("server_removed", "a removed server is not planned");
  const before = d.store.plan();
  const current: PlanState = meta.release ? { mode: "planned", rev: before.rev } : before;
  const now = d.clock();
  // New roles (PATCH): recorded whatever the plan does, then planned from.
  const rolesChanged = meta.roles !== undefined && JSON.stringify(meta.roles) !== JSON.stringify(state.record.roles);
  const record = rolesChanged ? { ...state.record, roles: meta.roles! } : state.record;
  const step = planStep(record, state.desired, current, inputs, now, { force: meta.release || rolesChanged });
  if (rolesChanged) {
    d.store.transaction(() => {
      d.store.save({ record });
      project(d.outbox);
      audit(d.outbox, {
        actor: meta.actor,
        action: "server.roles",
        target: `server:${record.id}`,
        details: { before: state.record.roles, after: record.roles },
      });
    });
  }
  if (step.kind === "skipped") return { ok: true, outcome: step.why, wrote: rolesChanged };
  // The coordinator holds a budget unit for this fix until a realized report past the generation
  // it saw: every one goes out until one has. Only for a write: a skipped one is told as nothing
  // written (src/check/service.ts), and its unit frees without a report.
  if (meta.deadline !== undefined) fixHoldAnnounced(d.store, state.desired.generation);
  // A drift fix re-issues the config (same agents, next generation) when the plan is unchanged,
  // so the host reconciles again.
  const reissue =
    step.kind === "recorded" && meta.reissue
      ? { ...state.desired, generation: state.desired.generation + 1, updated_at: now }
      : null;
  d.store.transaction(() => {
    const recordChanged = step.record !== record;
    if (recordChanged) {
      d.store.save({ record: step.record });
      // A shorter stale_after brings the quiet watch's timer forward.
      if (state.report) d.quiet.refit(state.report.received_at, step.record.stale_after_s);
    }
    d.store.setPlan(step.planState);
    if (meta.release && before.mode === "pinned") {
      audit(d.outbox, {
        actor: meta.actor,
        action: "server.desired.release",
        target: `server:${record.id}`,
        details: { rev: inputs.rev },
      });
    }
    if (step.kind === "issue") {
      d.store.save({ desired: step.next });
      // An agent the plan adds or drops is a newer choice than a rollout write sent before it, as
      // an operator's PUT is; one a rollout still waits on, dropped, is settled now, not at its
      // server timeout. Agents the server keeps keep their image (and their rollout marks).
      noteDesiredChange(d, record.id, state.desired, step.next, "planner");
      // A generation the planner issues for a marked intent change is audited by that change, in
      // its own batch (src/planner/service.ts markWhere); the desired config keeps the generation.
      if (!meta.audited)
        audit(d.outbox, {
          actor: meta.actor,
          action: "server.plan",
          target: `server:${record.id}`,
          details: {
            reason: meta.reason,
            rev: inputs.rev,
            generation: step.next.generation,
            agents: step.next.agents.map((a) => `${a.name}=${a.image}`),
            unknown_roles: step.plan.unknown_roles,
            unplannable: step.plan.unplannable,
          },
        });
    }
    if (reissue) {
      d.store.save({ desired: reissue });
      audit(d.outbox, {
        actor: meta.actor,
        action: "server.reissue",
        target: `server:${record.id}`,
        details: { reason: meta.reason, generation: reissue.generation },
      });
    }
    if (recordChanged || step.kind === "issue" || reissue) project(d.outbox);
  });
  return { ok: true, outcome: step.kind === "issue" ? "issued" : reissue ? "reissued" : step.why, wrote: true };
}
