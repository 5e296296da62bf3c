/**
 * Server lifecycle (docs/design.md §4 "Server lifecycle": terminate is not uninstall).
 * Pure decisions; the ledger stores what they return.
 *
 * - Decommission orders `terminate` for a managed server (its agents stop, their data stays; the
 *   provisioner reclaims the machine) and `uninstall` for a manual one only when its last report
 *   shows no assigned unit and no attached storage.
 * - The host acknowledges with a report at the lifecycle generation that lists no agent and no
 *   error; then cleanup runs, step by step, each durable and retried, and only then is the server
 *   removed. A forced removal skips the acknowledgement, not the cleanup.
 */
import type { ServerRecord, DesiredState } from "../model/server/record";
import type { StoredReport } from "../model/server/schemas";

export const CLEANUP_STEPS = ["index", "coordinator"] as const;
export type CleanupStep = (typeof CLEANUP_STEPS)[number];

export interface LifecycleState {
  order: "terminate" | "uninstall";
  /** The generation that carries the order. */
  generation: number;
  requested_at: number;
  requested_by: string;
  /** The config before the order, for cancel. */
  previous_agents: DesiredState["agents"];
  previous_state: ServerRecord["state"];
  /** Set when the host acknowledged, or at once when forced: cleanup runs from here. */
  cleanup_from?: number;
  forced?: { by: string; reason: string };
  done: CleanupStep[];
}

export type DecommissionDecision =
  | { kind: "order"; order: LifecycleState["order"] }
  | { kind: "blocked"; units: string[]; storage: string[]; why: string };

export function decommissionOrder(record: ServerRecord, report: StoredReport | undefined): DecommissionDecision {
  if (record.kind === "managed") return { kind: "order", order: "terminate" };
  // A borrowed machine is cleaned only when nothing of anyone else's is on it, as its last report says.
  if (!report)
    return { kind: "blocked", units: [], storage: [], why: "the server never reported; nothing shows it is empty" };
  const { units, storage } = report.assignments;
  if (units.length || storage.length) {
    return { kind: "blocked", units, storage, why: "the last report shows assigned units or attached storage" };
  }
  return { kind: "order", order: "uninstall" };
}

/** The lifecycle generation: no agents, the order. */
export function lifecycleDesired(desired: DesiredState, order: LifecycleState["order"], now: number): DesiredState {
  return { generation: desired.generation + 1, agents: [], lifecycle: order, updated_at: now };
}

/** Cancel: the config from before the order, at the next generation. */
export function cancelledDesired(desired: DesiredState, lc: LifecycleState, now: number): DesiredState {
  return { generation: desired.generation + 1, agents: lc.previous_agents, lifecycle: "run", updated_at: now };
}

/** A report acknowledges the order when it is at the lifecycle generation, with no agent and no error. */
export function acknowledges(lc: LifecycleState, report: StoredReport) {
  return report.generation === lc.generation && report.agents.length === 0 && report.errors.length === 0;
}
