/**
 * What the rollout shows: its summary (counts, pace, warnings) and pages of its targets and event
 * log. Reads only (its long poll waits in the Worker: ./waits.ts).
 */
import { type RolloutSpec, type RolloutState, type StrategySource, type TargetState } from "./machine";
import type { RolloutParts } from "./parts";
import { etaSeconds } from "./progress";
import { medianMs } from "./slow";
import type { BlockedBy } from "../model/blocked-by";
import type { SampleRow } from "./samples";
import { strategyBlockedBy, type Plan } from "./strategy";

/** Hostnames a step lists in the summary (GET …/targets pages through them all). */
const STEP_SERVERS_SHOWN = 50;

interface StepView {
  phase: number;
  step: number;
  kind: "release" | "pause" | "analysis";
  title: string;
  state: "pending" | "running" | "done" | "failed" | "skipped";
  label: { key: string; value: string } | null;
  size: number;
  counts: Partial<Record<TargetState, number>>;
  servers: string[];
  started_at: number | null;
  until: number | null;
}

export interface RolloutSummary {
  id: string;
  fleet: string;
  agent: string;
  image: string;
  version: string;
  state: RolloutState;
  pass: number;
  reason: string | null;
  concurrency: number;
  server_timeout_s: number | null;
  slow_factor: number | null;
  abort: RolloutSpec["abort"];
  update_channel: boolean;
  channel_updated: boolean | null;
  reboot_slot: boolean;
  counts: Record<TargetState, number>;
  total: number;
  median_s: number | null;
  eta_s: number | null;
  warnings: { server_id: string; hostname: string; at: number; message: string }[];
  created_by: string;
  created_at: number;
  ended_at: number | null;
  version_seq: number;
  strategy: Plan["strategy"] | null;
  strategy_source: StrategySource;
  steps: StepView[];
  current_phase: number | null;
  analysis: SampleRow[];
  blocked_by: BlockedBy[];
}

export function summary(p: RolloutParts): RolloutSummary {
  const { spec, core } = p.store.load()!;
  const m = medianMs(p);
  const channel = p.store.channel();
  return {
    id: spec.id,
    fleet: spec.fleet,
    agent: spec.agent,
    image: spec.image,
    version: spec.version,
    state: core.state,
    pass: core.pass,
    reason: core.reason,
    concurrency: spec.concurrency,
    server_timeout_s: spec.server_timeout_s,
    slow_factor: spec.slow_factor,
    abort: spec.abort,
    update_channel: spec.update_channel,
    channel_updated: spec.update_channel ? (channel?.updated ?? null) : false,
    reboot_slot: spec.reboot_slot,
    counts: core.counts,
    total: Object.values(core.counts).reduce((a, b) => a + b, 0),
    median_s: m === null ? null : Math.round(m) / 1000,
    eta_s: etaSeconds(core, spec.concurrency, m),
    warnings: p.store.events.slowWarnings(50),
    created_by: spec.created_by,
    created_at: spec.created_at,
    ended_at: core.ended_at,
    version_seq: core.version,
    strategy_source: spec.strategy_source ?? (p.store.plan() ? "request" : "none"),
    ...strategyView(p),
  };
}

/** The plan with each phase's state and servers, the analysis samples, and why the rollout waits. */
function strategyView(p: RolloutParts) {
  const { core } = p.store.load()!;
  const plan = p.store.plan();
  const ph = p.store.phase();
  const paused = p.store.pausedBy();
  const now = p.clock();
  const samples = plan ? p.store.samples.recent() : [];
  const last = ph ? samples.filter((r) => r.phase === ph.phase && r.seq === ph.seq) : [];
  const blocked_by = strategyBlockedBy({
    state: core.state,
    pass: core.pass,
    paused_by: paused?.by ?? null,
    paused_at: paused?.at ?? null,
    plan,
    progress: ph,
    last,
    now,
  });
  if (!plan || !ph) return { strategy: null, steps: [], current_phase: null, analysis: [], blocked_by };
  const byPhase = p.store.targets.phases(STEP_SERVERS_SHOWN);
  const ended = core.state !== "running" && core.state !== "paused";
  const steps = plan.phases.map((phase, i): StepView => {
    let state: StepView["state"];
    if (i < ph.phase) state = "done";
    else if (i > ph.phase) state = ended || core.pass > 0 ? "skipped" : "pending";
    else if (core.state === "succeeded") state = "done";
    else if (core.pass > 0 || core.state === "failed" || core.state === "cancelled")
      state = ph.started_at === null ? "skipped" : "failed";
    else state = ph.started_at === null ? "pending" : "running";
    const rows = byPhase.get(i);
    return {
      phase: i,
      step: phase.step,
      kind: phase.kind,
      title: phase.title,
      state,
      label: phase.label ?? null,
      size: phase.size,
      counts: phase.kind === "release" ? (rows?.counts ?? {}) : {},
      servers: phase.kind === "release" ? (rows?.hostnames ?? []) : [],
      started_at: i === ph.phase ? ph.started_at : null,
      until: i === ph.phase ? ph.until : null,
    };
  });
  return { strategy: plan.strategy, steps, current_phase: ph.phase, analysis: samples, blocked_by };
}

/** The summary now; null when no rollout was started here. */
export function summaryIfAny(p: RolloutParts): RolloutSummary | null {
  return p.store.load() ? summary(p) : null;
}

export function targetsPage(
  p: RolloutParts,
  opts: { pass?: number; state?: TargetState; after: number; limit: number },
) {
  const state = p.store.load();
  if (!state) return null;
  return p.store.targets.page(opts.pass ?? state.core.pass, opts.state, opts.after, opts.limit).map((t) => ({
    ...t,
    // Why it waits: kept while it is queued behind a refused slot or waits for the budget.
    blocked_by:
      t.state === "queued" || t.state === "waiting_budget" ? (p.store.blocked(t.pass, t.server_id) ?? []) : [],
  }));
}

export function eventsPage(p: RolloutParts, opts: { after: number; limit: number }) {
  if (!p.store.load()) return null;
  return p.store.events.page(opts.after, opts.limit);
}
