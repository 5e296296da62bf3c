import { iso } from "../lib/time";
import { isStuck, type GroupState } from "./semaphore";
import { withinWindows, type MaintenanceWindow } from "./windows";

export interface HolderView {
  id: string;
  granted_at: string;
  held_for_s: number;
  stuck: boolean;
  server: { id: string; hostname: string | null } | null;
}

export interface GroupView {
  name: string;
  slots: number;
  paused: boolean;
  windows: MaintenanceWindow[];
  /** Whether a new grant could happen now as far as pause and windows go. */
  open_now: boolean;
  available_slots: number;
  holders: HolderView[];
  updated_at: string;
}

export function groupView(
  name: string,
  g: GroupState,
  now: number,
  lockTtlMs: number,
  serverOf: (serverId: string) => { id: string; hostname: string | null },
): GroupView {
  return {
    name,
    slots: g.slots,
    paused: g.paused,
    windows: g.windows,
    open_now: !g.paused && withinWindows(g.windows, now),
    available_slots: Math.max(0, g.slots - g.holders.length),
    holders: g.holders.map((h) => ({
      id: h.id,
      granted_at: iso(h.granted_at),
      held_for_s: Math.max(0, Math.floor((now - h.granted_at) / 1000)),
      stuck: isStuck(h, now, lockTtlMs),
      server: h.server_id ? serverOf(h.server_id) : null,
    })),
    updated_at: iso(g.updated_at),
  };
}
