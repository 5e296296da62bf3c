/**
 * How a server's ledger applies the planner (docs/operator-guide.md). Pure, so each rule is unit-testable; the
 * ledger stores what these return.
 *
 * Pinned mode: an operator's explicit `PUT /v1/servers/{id}/desired` pins the server. The planner
 * leaves a pinned server's agents alone (it still records the newest inputs it was offered), until
 * `POST /v1/servers/{id}/desired/release` hands it back to planning, which re-plans it at once
 * from its current config (agents it runs keep their images; the rest follow roles and channels).
 */
import { plan, planDiffers, type Plan, type FleetPlanInputs } from "./plan";
import type { ServerRecord, DesiredState } from "../model/server/record";

export interface PlanState {
  mode: "planned" | "pinned";
  /** The fleet intent revision of the newest inputs this ledger was offered. */
  rev: number;
  pinned_at?: number;
  pinned_by?: string;
}

/** Ledgers from before planning existed are planned, having seen no inputs. */
export const INITIAL_PLAN_STATE: PlanState = { mode: "planned", rev: 0 };

export type PlanStep =
  | { kind: "skipped"; why: "older_inputs" | "not_running" }
  | { kind: "recorded"; planState: PlanState; record: ServerRecord; why: "pinned" | "unchanged"; plan: Plan }
  | { kind: "issue"; planState: PlanState; record: ServerRecord; next: DesiredState; plan: Plan };

/** The agents of `p`, keeping each one's instance id from the current config. */
function plannedAgents(p: Plan, current: DesiredState["agents"], newId: () => string) {
  const ids = new Map(current.map((a) => [a.name, a.instance_id]));
  return p.agents.map((a) => ({
    name: a.name,
    image: a.image,
    version: a.version,
    instance_id: ids.get(a.name) ?? newId(),
    ...(a.catalog ? { ...a.catalog } : {}),
  }));
}

export function planStep(
  record: ServerRecord,
  desired: DesiredState,
  planState: PlanState,
  inputs: FleetPlanInputs,
  now: number,
  opts: { force?: boolean; newId?: () => string } = {},
): PlanStep {
  // A late run with older inputs must not undo a newer one.
  if (inputs.rev < planState.rev && !opts.force) return { kind: "skipped", why: "older_inputs" };
  // Lifecycle orders belong to decommissioning; a removed server is never planned again.
  if (record.state === "removed" || record.state === "decommissioning" || desired.lifecycle !== "run") {
    return { kind: "skipped", why: "not_running" };
  }
  const nextRecord =
    record.stale_after_s === inputs.stale_after_s ? record : { ...record, stale_after_s: inputs.stale_after_s };
  const nextState: PlanState = { ...planState, rev: Math.max(planState.rev, inputs.rev) };
  const p = plan({
    roles: record.roles,
    profiles: inputs.profiles,
    capabilities: inputs.capabilities,
    channels: inputs.channels,
    current: desired.agents,
  });
  if (planState.mode === "pinned")
    return { kind: "recorded", planState: nextState, record: nextRecord, why: "pinned", plan: p };
  if (!planDiffers(p, desired.agents))
    return { kind: "recorded", planState: nextState, record: nextRecord, why: "unchanged", plan: p };
  return {
    kind: "issue",
    planState: nextState,
    record: nextRecord,
    plan: p,
    next: {
      generation: desired.generation + 1,
      agents: plannedAgents(p, desired.agents, opts.newId ?? (() => crypto.randomUUID())),
      lifecycle: desired.lifecycle,
      updated_at: now,
    },
  };
}
