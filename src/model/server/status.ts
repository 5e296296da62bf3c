import type { DesiredState } from "./record";
import type { AgentStatus, AgentStatusRow, ServerStatus, StoredReport } from "./schemas";

export interface ComputedStatus {
  status: ServerStatus;
  agents: AgentStatusRow[];
}

/**
 * Status is derived from desired + last report every time it is asked for, never stored as a
 * belief (docs/design.md §4): a host is realized only when its own report says so.
 */
export function computeStatus(
  desired: DesiredState,
  report: StoredReport | undefined,
  now: number,
  staleAfterMs: number,
): ComputedStatus {
  if (!report) {
    return {
      status: "unknown",
      agents: desired.agents.map((d) => ({
        name: d.name,
        status: "pending",
        desired: { image: d.image, version: d.version, instance_id: d.instance_id },
        reported: null,
        errors: [],
      })),
    };
  }

  const current = report.generation === desired.generation;
  const reported = new Map(report.agents.map((a) => [a.name, a]));
  const wanted = new Map(desired.agents.map((a) => [a.name, a]));
  const errorsOf = (name: string) =>
    report.errors.filter((e) => e.agent === name).map((e) => ({ op: e.op, message: e.message }));

  const rows: AgentStatusRow[] = [];
  for (const d of desired.agents) {
    const r = reported.get(d.name);
    const errors = errorsOf(d.name);
    // The version too: a catalog image's string is its name, the same for every version of it.
    const matches = !!r && r.image === d.image && r.version === d.version && r.state === "running";
    let status: AgentStatus;
    if (current && errors.length > 0) status = "failed";
    else if (matches) status = "realized";
    else status = current ? "drifted" : "pending";
    rows.push({
      name: d.name,
      status,
      desired: { image: d.image, version: d.version, instance_id: d.instance_id },
      reported: r ? { image: r.image, version: r.version, instance_id: r.instance_id, state: r.state } : null,
      errors,
    });
  }
  for (const r of report.agents) {
    if (wanted.has(r.name)) continue;
    const errors = errorsOf(r.name);
    // Still reported means still there: never believed removed until a report says so.
    const status: AgentStatus = errors.some((e) => e.op === "remove") ? "removal_failed" : "removal_pending";
    rows.push({
      name: r.name,
      status,
      desired: null,
      reported: { image: r.image, version: r.version, instance_id: r.instance_id, state: r.state },
      errors,
    });
  }
  rows.sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));

  let status: ServerStatus;
  if (now - report.received_at > staleAfterMs) status = "stale";
  else if (!current) status = "pending";
  else if (report.errors.length > 0) status = "failed";
  else status = rows.every((r) => r.status === "realized") ? "realized" : "drifted";
  return { status, agents: rows };
}
