// What a run counts while its hosts play — operations, errors by kind, report, convergence and
// push latencies, reboots — from the agents' own events, and how the summary reads them.
import { performance } from "node:perf_hooks";
import type { AgentEvent } from "../agent/agent.ts";
import { ApiError } from "../agent/http.ts";
import type { SimHost, SimSummary } from "./model.ts";
import { percentile } from "./random.ts";

export const round = (n: number, digits = 1) => Math.round(n * 10 ** digits) / 10 ** digits;

export class Tally {
  readonly ops = { polls: 0, polls_changed: 0, pushes: 0, reports: 0, heartbeats: 0, fleetlock: 0, errors: 0 };
  readonly channel = { opened: 0, closed: 0 };
  readonly group = { samples: 0, max_holders: 0, over_slots: 0 };
  reboots = 0;
  lost = 0;
  private readonly pushMs: number[] = [];
  private readonly errorKinds = new Map<string, number>();
  private readonly reportMs: number[] = [];
  private readonly convergeMs: number[] = [];

  /** The listener for one boot of host `h`. */
  onEvent = (h: SimHost, bootId: string) => (e: AgentEvent) => {
    const ops = this.ops;
    if (e.type === "desired") {
      ops.polls++;
      if (e.changed) ops.polls_changed++;
    } else if (e.type === "pushed") {
      ops.pushes++;
      const issued = h.issued.find((x) => x.generation === e.generation);
      if (e.message !== "refresh" && issued?.connected && !issued.pushed) {
        issued.pushed = true;
        this.pushMs.push(performance.now() - issued.at);
      }
    } else if (e.type === "channel") {
      h.channelOpen = e.state === "open";
      if (e.state === "open") this.channel.opened++;
      else this.channel.closed++;
    } else if (e.type === "reported") {
      ops.reports++;
      this.reportMs.push(e.ms);
      const at = performance.now();
      h.reports.push({ generation: e.generation, status: e.accepted.status, bootId, at });
      const issued = h.issued.find((x) => x.generation === e.generation);
      if (e.accepted.status === "realized" && issued && !(issued as { done?: boolean }).done) {
        (issued as { done?: boolean }).done = true;
        this.convergeMs.push(at - issued.at);
      }
    } else if (e.type === "unchanged") {
      // Over HTTP: the report was not sent, the next poll carries its tag as the heartbeat.
      ops.heartbeats++;
    } else if (e.type === "error") {
      ops.errors++;
      const err = e.error;
      const kind =
        err instanceof ApiError
          ? `${err.status} ${err.code}`
          : err instanceof Error
            ? err.cause instanceof Error
              ? `${err.message}: ${err.cause.message}`
              : err.message
            : String(err);
      this.errorKinds.set(kind.slice(0, 120), (this.errorKinds.get(kind.slice(0, 120)) ?? 0) + 1);
    }
  };

  /** Host operations so far: polls, pushes, reports, FleetLock calls. */
  opsTotal() {
    return this.ops.polls + this.ops.pushes + this.ops.reports + this.ops.fleetlock;
  }

  /** The ten commonest errors, by kind. */
  errorsByKind() {
    return Object.fromEntries([...this.errorKinds].sort((a, b) => b[1] - a[1]).slice(0, 10));
  }

  latency(): SimSummary["latency_ms"] {
    const sortedReports = this.reportMs.sort((a, b) => a - b);
    const sortedConverge = this.convergeMs.sort((a, b) => a - b);
    const sortedPush = this.pushMs.sort((a, b) => a - b);
    return {
      report_p50: round(percentile(sortedReports, 50)),
      report_p99: round(percentile(sortedReports, 99)),
      converge_p50: sortedConverge.length ? round(percentile(sortedConverge, 50)) : null,
      converge_p99: sortedConverge.length ? round(percentile(sortedConverge, 99)) : null,
      push_p50: sortedPush.length ? round(percentile(sortedPush, 50)) : null,
      push_p99: sortedPush.length ? round(percentile(sortedPush, 99)) : null,
    };
  }
}

/** Hosts by the status of their last accepted report (silent ones apart). */
export function byStatus(hosts: SimHost[]) {
  const counts: Record<string, number> = {};
  for (const h of hosts) {
    const last = h.reports.at(-1);
    const k = h.silent ? "silent" : (last?.status ?? "no_report");
    counts[k] = (counts[k] ?? 0) + 1;
  }
  return counts;
}
