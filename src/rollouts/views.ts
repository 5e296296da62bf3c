/**
 * What the rollout shows: its summary (counts, pace, warnings) and pages of its targets and event
 * log. Reads only (its long poll waits in the Worker: ./waits.ts).
 */
import { type RolloutSpec, type RolloutState, type TargetState } from "./machine";
import type { RolloutParts } from "./parts";
import { etaSeconds } from "./progress";
import { medianMs } from "./slow";

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
  };
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
