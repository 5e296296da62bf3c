/**
 * What operators see of a server (GET /v1/servers/{id}): the ledger's state with its status
 * computed as of `now`, never stored as a belief.
 */
import type { PlanState } from "../planner/ledger-side";
import type { LifecycleState } from "./lifecycle";
import type { ServerRecord, DesiredState } from "../model/server/record";
import type { DesiredConfig, StoredReport } from "../model/server/schemas";
import { computeStatus, type ComputedStatus } from "../model/server/status";
import type { LedgerStore, RefreshState } from "./store";

export interface ServerView {
  record: Omit<ServerRecord, "token_hash" | "token_id" | "token_revoked_at">;
  plan: PlanState;
  lifecycle: LifecycleState | null;
  refresh: RefreshState | null;
  desired: DesiredConfig;
  report: StoredReport | null;
  computed: ComputedStatus;
}

/** The desired config as the host and operators are given it. */
export function configOf(record: ServerRecord, desired: DesiredState): DesiredConfig {
  return { server_id: record.id, generation: desired.generation, agents: desired.agents, lifecycle: desired.lifecycle };
}

export function viewOf(store: LedgerStore, now: number): ServerView | null {
  const state = store.load();
  if (!state) return null;
  const { token_hash: _h, token_id: _t, token_revoked_at: _r, ...record } = state.record;
  return {
    record,
    plan: store.plan(),
    lifecycle: store.lifecycle(),
    refresh: store.refresh(),
    desired: configOf(state.record, state.desired),
    report: state.report ?? null,
    computed: computeStatus(state.desired, state.report, now, state.record.stale_after_s * 1000),
  };
}

/** When the view's status turns stale with no write (nothing wakes a waiter then); Infinity if never. */
export function staleTurnAt(view: ServerView) {
  return view.report ? view.report.received_at + view.record.stale_after_s * 1000 + 1 : Infinity;
}
