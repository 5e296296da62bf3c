import { iso } from "../lib/time";
import type { BlockedBy } from "../model/blocked-by";
import type { HoldView } from "./gate-rules";
import type { GateConfig, GateName } from "./gates";
import { liveEntries, unclaimedMs, type QueueEntry } from "./queue";
import { DEFAULT_HEALTH_TIMEOUT_S, isStuck, type GroupState } from "./semaphore";
import { withinWindows, type MaintenanceWindow } from "../model/windows";

interface HolderView {
  id: string;
  granted_at: string;
  held_for_s: number;
  stuck: boolean;
  server: { id: string; hostname: string | null } | null;
  /** Granted while the host could not be answered: kept for it until then, unless it comes back. */
  unclaimed_until: string | null;
  rebooted_at: string | null;
  unhealthy_after_reboot: boolean;
}

interface QueuedView {
  position: number;
  id: string;
  server: { id: string; hostname: string | null } | null;
  waiting_since: string;
  waited_s: number;
  /** Until when it may wait; it is answered with a refusal then. */
  deadline: string;
  /** Whether its request is still open here (false: it went away, or the coordinator restarted). */
  connected: boolean;
  /** Why it waits, first the reason to clear first. */
  blocked_by: BlockedBy[];
}

/** What the health gates say about a group (./gate-rules.ts). */
export interface GroupGatesView {
  /** Whose gates apply: the group's own, the fleet's default, or none. */
  source: "group" | "fleet" | "none";
  /** Its own configuration, null when it follows the fleet's default. */
  own: GateConfig | null;
  hold: HoldView | null;
  verdicts: { gate: GateName; open: boolean; kind: string; reason: string }[];
}

export interface GroupView {
  name: string;
  slots: number;
  paused: boolean;
  release_on: "steady_state" | "healthy_report";
  health_timeout_s: number;
  pause_on_unhealthy: boolean;
  /** Why the coordinator paused it by itself; null when an operator did, or it runs. */
  paused_reason: string | null;
  windows: MaintenanceWindow[];
  /** Whether a new grant could happen now as far as pause and windows go. */
  open_now: boolean;
  available_slots: number;
  queue_wait_s: number;
  unclaimed_grant_s: number;
  holders: HolderView[];
  queue: QueuedView[];
  gates: GroupGatesView["verdicts"];
  gates_source: GroupGatesView["source"];
  own_gates: GateConfig | null;
  hold: HoldView | null;
  /** What holds the whole group (pause, holds, a closed gate or window); empty when it would grant. */
  blocked_by: BlockedBy[];
  updated_at: string;
}

export function groupView(
  name: string,
  g: GroupState,
  queue: { entries: readonly QueueEntry[]; connected: (id: string) => boolean },
  now: number,
  lockTtlMs: number,
  serverOf: (serverId: string) => { id: string; hostname: string | null },
  gates: GroupGatesView,
  blocked: { group: BlockedBy[]; host: (e: QueueEntry, ahead: QueueEntry[]) => BlockedBy[] } = {
    group: [],
    host: () => [],
  },
): GroupView {
  return {
    name,
    slots: g.slots,
    paused: g.paused,
    release_on: g.release_on ?? "steady_state",
    health_timeout_s: g.health_timeout_s ?? DEFAULT_HEALTH_TIMEOUT_S,
    pause_on_unhealthy: g.pause_on_unhealthy ?? true,
    paused_reason: g.paused ? (g.paused_reason ?? null) : null,
    windows: g.windows,
    open_now: !g.paused && withinWindows(g.windows, now),
    available_slots: Math.max(0, g.slots - g.holders.length),
    queue_wait_s: g.queue_wait_s ?? 0,
    unclaimed_grant_s: unclaimedMs(g) / 1000,
    holders: g.holders.map((h) => ({
      id: h.id,
      granted_at: iso(h.granted_at),
      held_for_s: Math.max(0, Math.floor((now - h.granted_at) / 1000)),
      stuck: isStuck(h, now, lockTtlMs),
      server: h.server_id ? serverOf(h.server_id) : null,
      unclaimed_until: h.unclaimed_until === undefined ? null : iso(h.unclaimed_until),
      rebooted_at: h.rebooted_at === undefined ? null : iso(h.rebooted_at),
      unhealthy_after_reboot: h.unhealthy_at !== undefined,
    })),
    queue: liveEntries(queue.entries, now).map((e, i, all) => ({
      position: i + 1,
      id: e.id,
      server: e.server_id ? serverOf(e.server_id) : null,
      waiting_since: iso(e.since),
      waited_s: Math.max(0, Math.floor((now - e.since) / 1000)),
      deadline: iso(e.deadline),
      connected: queue.connected(e.id),
      blocked_by: blocked.host(e, all.slice(0, i)),
    })),
    gates: gates.verdicts,
    gates_source: gates.source,
    own_gates: gates.own,
    hold: gates.hold,
    blocked_by: blocked.group,
    updated_at: iso(g.updated_at),
  };
}
