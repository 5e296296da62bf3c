// What the simulator keeps about each host it plays, and what a run reports.
import type { ServerStatus } from "../cli/api.ts";

interface HostFlags {
  failInstall: boolean;
  failRemove: boolean;
  slow: boolean;
  silentAtMs: number | null;
  rebootAtMs: number | null;
  lostSteady: boolean;
}

export interface SimHost {
  index: number;
  id: string;
  hostname: string;
  fleetlockId: string;
  token: string;
  flags: HostFlags;
  /** Every accepted report: the generation it claimed and the status the server computed. */
  reports: { generation: number; status: ServerStatus; bootId: string; at: number }[];
  /** Generations the operator (the simulator) issued to this host, in order. */
  /** `connected`: the host's channel was open when the generation was written (push latency counts only those). */
  issued: { generation: number; at: number; connected?: boolean; pushed?: boolean }[];
  /** Whether the host's channel is open now. */
  channelOpen: boolean;
  bootIds: string[];
  silent: boolean;
  reboot: { grantedAt: number | null; refusals: number; backAt: number | null; steadyState: "sent" | "lost" | null };
  exit: string | null;
}

/** How far the setup is: servers registered (or reused) and first orders issued, of `total`. */
export interface SetupProgress {
  registered: number;
  ordered: number;
  total: number;
}

export interface Progress {
  elapsedS: number;
  durationS: number;
  byStatus: Record<string, number>;
  ops: number;
  errors: number;
  reboots: number;
}

export interface SimSummary {
  url: string;
  fleet: string;
  servers: number;
  registered: number;
  reused: number;
  durationS: number;
  byStatus: Record<string, number>;
  /** `heartbeats`: reports not sent over HTTP because nothing changed (the next poll carried their tag). */
  ops: {
    polls: number;
    polls_changed: number;
    pushes: number;
    reports: number;
    heartbeats: number;
    fleetlock: number;
    total: number;
    errors: number;
  };
  /** Channel sockets opened, and closed or refused (the host channel only). */
  channel: { opened: number; closed: number };
  errors_by_kind: Record<string, number>;
  /** push: from the operator's write of a generation to its host receiving it over the channel (hosts connected at the write). */
  latency_ms: {
    report_p50: number;
    report_p99: number;
    converge_p50: number | null;
    converge_p99: number | null;
    push_p50: number | null;
    push_p99: number | null;
  };
  reboots: { planned: number; granted: number; refusals: number; back: number; steady_state_lost: number };
  group: { slots: number; samples: number; max_holders: number; over_slots: number; holders_at_end: string[] };
  /** What the simulator itself cost: its CPU time per host operation, and how busy its event loop was. */
  overhead: { cpu_us_per_op: number; cpu_ms: number; event_loop_utilization: number };
  hosts: SimHost[];
}
