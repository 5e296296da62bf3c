/**
 * The reboot semaphore of one group, as pure functions over plain data: the coordinator Durable
 * Object loads a group, applies one of these and stores the result in the same synchronous turn,
 * so nothing here needs to know about storage, clocks or concurrency (`now` is always passed in).
 */
import type { GateConfig, GateName, Hold } from "./gates";
import type { FleetLockKind } from "../domain/enums";
import { withinWindows, type MaintenanceWindow } from "../model/windows";

/** healthy_report groups: how long after its reboot a server may take to report healthy (./health.ts). */
export const DEFAULT_HEALTH_TIMEOUT_S = 900;

export interface Holder {
  /** The FleetLock client id (Zincati's node id). */
  id: string;
  /** The registered server that id belongs to; null for an unknown id a fleet chose to allow. */
  server_id: string | null;
  granted_at: number;
  /**
   * Set on a grant made to a parked host that could not be answered (its connection went, or the
   * coordinator restarted): the slot is kept for it until then, its next pre-reboot claims it.
   */
  unclaimed_until?: number;
  /** Under `release_on: healthy_report`: when the host was back (steady state, or a new boot seen); the slot waits for a healthy report. */
  rebooted_at?: number;
  /** When its health time-out passed without a healthy report (the slot stays taken). */
  unhealthy_at?: number;
  /** Its being stuck (held past lock_ttl_s) was reported to the fleet's webhooks. */
  stuck_reported?: boolean;
}

export interface GroupState {
  slots: number;
  paused: boolean;
  /** Why it is paused, when the coordinator paused it by itself (a server unhealthy after its reboot). */
  paused_reason?: string | null;
  windows: MaintenanceWindow[];
  /** In grant order. May exceed `slots` after a shrink: holders are never evicted by a resize. */
  holders: Holder[];
  /** How long a pre-reboot may wait for a slot (queue.ts); 0 or absent: refused at once. */
  queue_wait_s?: number;
  /** How long a grant its host could not be told of is kept for it (queue.ts); absent: UNCLAIMED_GRANT_S. */
  unclaimed_grant_s?: number;
  /** The group's own health gates (./gates.ts); absent or null: the fleet's default gates. */
  gates?: GateConfig | null;
  /** An operator's hold on this group. */
  hold?: Hold | null;
  /** What frees a slot (./health.ts): the host's steady state (default) or a healthy report from its new boot. */
  release_on?: "steady_state" | "healthy_report";
  /** healthy_report: how long after the reboot a healthy report may take. */
  health_timeout_s?: number;
  /** healthy_report: whether the group pauses itself when a server misses it (default true). */
  pause_on_unhealthy?: boolean;
  /** The first closed gate as last noted, so its opening and closing are reported once each. */
  gate?: { gate: GateName; kind: FleetLockKind; reason: string; since: number } | null;
  updated_at: number;
}

export type Refusal = "semaphore_full" | "group_paused" | "outside_maintenance_window";

export type AcquireResult =
  { ok: true; group: GroupState; granted: Holder; changed: boolean } | { ok: false; kind: Refusal; value: string };

export function newGroup(slots: number, now: number): GroupState {
  return { slots, paused: false, windows: [], holders: [], queue_wait_s: 0, updated_at: now };
}

export const holderOf = (g: GroupState, id: string) => g.holders.find((h) => h.id === id) ?? null;

/**
 * RecursiveLock: an id that already holds a slot succeeds again, whatever the group's state
 * (it may already be rebooting); otherwise pause, windows, then capacity decide.
 */
export function acquire(g: GroupState, id: string, serverId: string | null, now: number): AcquireResult {
  const held = holderOf(g, id);
  if (held) return { ok: true, group: g, granted: held, changed: false };
  if (g.paused) return { ok: false, kind: "group_paused", value: "the reboot group is paused by an operator" };
  if (!withinWindows(g.windows, now)) {
    return { ok: false, kind: "outside_maintenance_window", value: "no maintenance window of the group is open now" };
  }
  if (g.holders.length >= g.slots) {
    return {
      ok: false,
      kind: "semaphore_full",
      value: `all ${g.slots} slot(s) of the group are held (${g.holders.length} holder(s))`,
    };
  }
  const granted: Holder = { id, server_id: serverId, granted_at: now };
  return { ok: true, group: { ...g, holders: [...g.holders, granted], updated_at: now }, granted, changed: true };
}

/** UnlockIfHeld: releasing what is not held is a success that changes nothing. */
export function release(g: GroupState, id: string, now: number): { group: GroupState; released: Holder | null } {
  const released = holderOf(g, id);
  if (!released) return { group: g, released: null };
  return { group: { ...g, holders: g.holders.filter((h) => h !== released), updated_at: now }, released };
}

/** Releases every hold whose server matches (a rebooted or removed server). */
export function releaseWhere(
  g: GroupState,
  match: (h: Holder) => boolean,
  now: number,
): { group: GroupState; released: Holder[] } {
  const released = g.holders.filter(match);
  if (released.length === 0) return { group: g, released };
  return { group: { ...g, holders: g.holders.filter((h) => !match(h)), updated_at: now }, released };
}

/** A holder keeps its slot when its client id is renamed (the server's fleetlock_id changed). */
export function renameHolder(g: GroupState, from: string, to: string, now: number): GroupState {
  if (!holderOf(g, from) || holderOf(g, to)) return g;
  return { ...g, holders: g.holders.map((h) => (h.id === from ? { ...h, id: to } : h)), updated_at: now };
}

export interface GroupChange {
  slots: number;
  paused?: boolean;
  windows?: MaintenanceWindow[];
  queue_wait_s?: number;
  unclaimed_grant_s?: number;
  /** The group's own gates; null: the fleet's default again. Omitted: unchanged. */
  gates?: GateConfig | null;
  release_on?: "steady_state" | "healthy_report";
  health_timeout_s?: number;
  pause_on_unhealthy?: boolean;
}

/**
 * Create or change a group live. Holders are kept as they are: a smaller slot count only stops
 * new grants until enough holders have released (airlock, another FleetLock server, ignores a new count instead).
 */
export function configure(g: GroupState | null, change: GroupChange, now: number): GroupState {
  const base = g ?? newGroup(change.slots, now);
  return {
    ...base,
    slots: change.slots,
    paused: change.paused ?? base.paused,
    // An operator's pause or resume replaces the reason the coordinator paused it for.
    paused_reason: change.paused === undefined ? (base.paused_reason ?? null) : null,
    windows: change.windows ?? base.windows,
    queue_wait_s: change.queue_wait_s ?? base.queue_wait_s ?? 0,
    ...((change.unclaimed_grant_s ?? base.unclaimed_grant_s) === undefined
      ? {}
      : { unclaimed_grant_s: change.unclaimed_grant_s ?? base.unclaimed_grant_s }),
    gates: change.gates === undefined ? (base.gates ?? null) : change.gates,
    release_on: change.release_on ?? base.release_on ?? "steady_state",
    health_timeout_s: change.health_timeout_s ?? base.health_timeout_s ?? DEFAULT_HEALTH_TIMEOUT_S,
    pause_on_unhealthy: change.pause_on_unhealthy ?? base.pause_on_unhealthy ?? true,
    updated_at: now,
  };
}

/** A holder is stuck once it has held its slot for longer than the fleet's lock TTL. */
export const isStuck = (h: Holder, now: number, lockTtlMs: number) => now - h.granted_at > lockTtlMs;
