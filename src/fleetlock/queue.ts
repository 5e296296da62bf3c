/**
 * The fair reboot queue of one group, as pure functions over plain data (like semaphore.ts): a
 * pre-reboot that finds the group full (or outside its windows) may park for up to the group's
 * `queue_wait_s`, and the longest-waiting host gets the next free slot. The coordinator applies
 * these in one synchronous turn together with the storage writes, so FIFO order, the slot count
 * and every grant are decided where no other request can interleave.
 */
import type { FleetLockKind } from "../domain/enums";
import { holderOf, type GroupState, type Holder, type Refusal } from "./semaphore";
import { withinWindows } from "../model/windows";

import { MAX_QUEUED_PER_GROUP, MAX_QUEUE_WAIT_S } from "../domain/limits";

export { MAX_QUEUE_WAIT_S };

/**
 * How long a grant made to a parked host that can no longer be answered (its connection went, or
 * the coordinator restarted under it) is kept for it. Zincati asks again every 300 s plus up to
 * 10 % jitter (src/update_agent/mod.rs DEFAULT_REFRESH_PERIOD_SECS, actor.rs add_jitter), so its
 * next pre-reboot claims the slot well within this; a host that never comes back frees it here.
 */
export const UNCLAIMED_GRANT_S = 600;

export interface QueueEntry {
  id: string;
  server_id: string | null;
  /** When the host first parked: FIFO order, shown to operators. */
  since: number;
  /** Parked until then; afterwards the host has been (or would have been) answered with a refusal. */
  deadline: number;
  /** Arrival order among entries parked in the same millisecond. */
  seq: number;
  /**
   * Parked past the group's own queue_wait_s to wait for a gate's input being read: once the read
   * is in, its deadline is the group's own again (a group that does not queue refuses it then).
   */
  until_read?: true;
}

export type Queue = readonly QueueEntry[];

export const queuedOf = (q: Queue, id: string) => q.find((e) => e.id === id) ?? null;

/** Entries whose wait has not run out, in FIFO order. */
export const liveEntries = (q: Queue, now: number) => q.filter((e) => e.deadline > now);

export const refusalValue: Record<Refusal, string> = {
  group_paused: "the reboot group is paused by an operator",
  outside_maintenance_window: "no maintenance window of the group is open now",
  semaphore_full: "every slot of the group is held",
};

/** A refusal as hosts are told it. */
export interface Closure {
  kind: FleetLockKind;
  value: string;
  /** A gate waiting for its input to be read: a host may park this long even where the group does not queue. */
  wait_s?: number;
}

/**
 * Why the group grants nothing new now, with what hosts are told: a pause first, then a closed
 * health gate (`gate`, ./gates.ts), then windows, then slots. Null when it would grant.
 */
export function closureOf(g: GroupState, now: number, gate: Closure | null = null): Closure | null {
  if (g.paused)
    return {
      kind: "group_paused",
      value: g.paused_reason ? `the reboot group is paused: ${g.paused_reason}` : refusalValue.group_paused,
    };
  if (gate) return gate;
  if (!withinWindows(g.windows, now))
    return { kind: "outside_maintenance_window", value: refusalValue.outside_maintenance_window };
  if (g.holders.length >= g.slots) {
    return {
      kind: "semaphore_full",
      value: `all ${g.slots} slot(s) of the group are held (${g.holders.length} holder(s))`,
    };
  }
  return null;
}

export type Admission =
  | { kind: "granted"; group: GroupState; changed: boolean }
  | { kind: "parked"; queue: Queue; entry: QueueEntry; changed: boolean }
  | { kind: "refused"; refusal: FleetLockKind; value: string };

/**
 * A pre-reboot against a group and its queue. Holding a slot succeeds again (recursive lock);
 * a host already parked keeps its place (the same id parking twice holds one place); a free slot
 * goes to a newcomer only when nobody is parked ahead of it and no gate is closed; otherwise the
 * host parks when the group allows waiting and is refused as before when it does not. A paused
 * group parks no one: an operator's pause is not a wait of seconds.
 */
export function admit(
  g: GroupState,
  q: Queue,
  id: string,
  serverId: string | null,
  now: number,
  opts: { mayPark: boolean; gate?: Closure | null; budget?: Closure | null },
): Admission {
  if (holderOf(g, id))
    return { kind: "granted", group: claim(g, id, now), changed: holderOf(g, id)!.unclaimed_until !== undefined };
  const live = liveEntries(q, now);
  const mine = queuedOf(live, id);
  if (mine) return { kind: "parked", queue: q, entry: mine, changed: false };
  // The fleet's disruption budget comes last: the group would grant, the fleet cannot take one more.
  const closed = closureOf(g, now, opts.gate ?? null) ?? opts.budget ?? null;
  if (live.length === 0 && !closed) {
    const granted: Holder = { id, server_id: serverId, granted_at: now };
    return { kind: "granted", group: { ...g, holders: [...g.holders, granted], updated_at: now }, changed: true };
  }
  const why: Closure = closed ?? { kind: "semaphore_full" as const, value: refusalValue.semaphore_full };
  const queued = live.length ? `; ${live.length} host(s) are queued` : "";
  const wait = Math.max(waitOf(g), why.wait_s ?? 0);
  if (why.kind === "group_paused" || !opts.mayPark || wait === 0)
    return { kind: "refused", refusal: why.kind, value: `${why.value}${queued}` };
  if (live.length >= MAX_QUEUED_PER_GROUP) {
    return { kind: "refused", refusal: why.kind, value: `${why.value}; the queue is full (${live.length} host(s))` };
  }
  const seq = q.reduce((m, e) => Math.max(m, e.seq), 0) + 1;
  const entry: QueueEntry = {
    id,
    server_id: serverId,
    since: now,
    deadline: now + wait * 1000,
    seq,
    ...(wait > waitOf(g) ? { until_read: true as const } : {}),
  };
  return { kind: "parked", queue: [...live, entry], entry, changed: true };
}

const waitOf = (g: GroupState) => g.queue_wait_s ?? 0;

/**
 * The read a host waited for is in (`closed` is not a gate being read): entries parked only for it
 * get the group's own deadline back; those past it leave the queue (`done`, to be refused now).
 */
export function readDone(
  g: GroupState,
  q: Queue,
  now: number,
  closed: Closure | null,
): { queue: Queue; done: QueueEntry[] } {
  if (closed?.wait_s || !q.some((e) => e.until_read)) return { queue: q, done: [] };
  const done: QueueEntry[] = [];
  const queue = q.flatMap((e) => {
    if (!e.until_read) return [e];
    const { until_read: _, ...rest } = e;
    const deadline = e.since + waitOf(g) * 1000;
    if (deadline <= now) {
      done.push(e);
      return [];
    }
    return [{ ...rest, deadline }];
  });
  return { queue, done };
}

/** A host that comes back for a slot granted while it could not be answered now has it. */
export function claim(g: GroupState, id: string, now: number): GroupState {
  const h = holderOf(g, id);
  if (!h || h.unclaimed_until === undefined) return g;
  return { ...g, holders: g.holders.map((x) => (x === h ? withoutClaim(x) : x)), updated_at: now };
}

function withoutClaim(h: Holder): Holder {
  const { unclaimed_until: _, ...rest } = h;
  return rest;
}

/**
 * How a grant to a parked id reaches it: `live`, answered now; `provisional`, answered now but the
 * runtime cannot tell whether its client is still there (wrangler dev never reports a hang-up), so
 * the slot is also kept as unclaimed until the host calls again; `gone`, nobody can be answered,
 * the slot is kept unclaimed for its next pre-reboot.
 */
export type Answer = "live" | "provisional" | "gone";

export interface DrainOptions {
  /** An id that meanwhile took a slot in another group (one slot per id). */
  holdsElsewhere?: (id: string) => boolean;
  /** Whether the entry may still be granted: its server still owns the id. Others leave the queue. */
  eligible?: (entry: QueueEntry) => boolean;
  /** Why the group grants nothing new now; defaults to pause, windows and slots (gates add theirs). */
  closed?: (g: GroupState) => Closure | null;
  /**
   * Whether the fleet's disruption budget refuses this entry's server, counting the servers granted
   * earlier in this drain. A refused entry keeps its place and the next one may go (another zone).
   */
  budgetRefuses?: (entry: QueueEntry, granted: string[]) => boolean;
}

export interface Drained {
  group: GroupState;
  queue: Queue;
  /** Hosts that got a slot, in grant order; `answerable` ones are answered 200 now. */
  granted: { entry: QueueEntry; answerable: boolean; provisional?: boolean }[];
  /** Entries that may no longer be granted (their server gave up the id) and left the queue. */
  dropped: QueueEntry[];
}

/** How long an unclaimed grant is kept for its host in this group. */
export const unclaimedMs = (g: GroupState) => (g.unclaimed_grant_s ?? UNCLAIMED_GRANT_S) * 1000;

/**
 * Hands free slots to parked hosts, longest-waiting first, while the group is open. Expired
 * entries leave first. A grant to a host nobody can answer any more (or that the runtime cannot
 * vouch for) is kept for it as unclaimed for the group's bound: its next call claims it, or it is
 * released.
 */
export function drain(
  g: GroupState,
  q: Queue,
  now: number,
  answer: (id: string) => Answer | boolean,
  opts: DrainOptions = {},
): Drained {
  const closed = opts.closed ?? ((x: GroupState) => closureOf(x, now));
  let queue = liveEntries(q, now);
  let group = g;
  const granted: Drained["granted"] = [];
  const dropped: QueueEntry[] = [];
  const waiting: QueueEntry[] = [];
  while (queue.length > 0 && closed(group) === null) {
    const [entry, ...rest] = queue;
    queue = rest;
    if (opts.eligible && !opts.eligible(entry)) {
      dropped.push(entry);
      continue;
    }
    if (holderOf(group, entry.id) || opts.holdsElsewhere?.(entry.id)) continue;
    const grantedServers = granted.flatMap((x) => (x.entry.server_id ? [x.entry.server_id] : []));
    if (opts.budgetRefuses?.(entry, grantedServers)) {
      waiting.push(entry);
      continue;
    }
    const a = answer(entry.id);
    const how: Answer = a === true ? "live" : a === false ? "gone" : a;
    const holder: Holder = { id: entry.id, server_id: entry.server_id, granted_at: now };
    if (how !== "live") holder.unclaimed_until = now + unclaimedMs(g);
    group = { ...group, holders: [...group.holders, holder], updated_at: now };
    granted.push(
      how === "provisional" ? { entry, answerable: true, provisional: true } : { entry, answerable: how === "live" },
    );
  }
  // Entries the budget refused keep their places, ahead of those never looked at.
  const left = waiting.length ? [...waiting, ...queue] : queue;
  return { group, queue: left.length === q.length ? q : left, granted, dropped };
}

/** Releases grants nobody came back for within UNCLAIMED_GRANT_S. */
export function releaseUnclaimed(g: GroupState, now: number): { group: GroupState; released: Holder[] } {
  const released = g.holders.filter((h) => h.unclaimed_until !== undefined && h.unclaimed_until <= now);
  if (released.length === 0) return { group: g, released };
  return { group: { ...g, holders: g.holders.filter((h) => !released.includes(h)), updated_at: now }, released };
}

export const dequeue = (q: Queue, id: string): Queue => (queuedOf(q, id) ? q.filter((e) => e.id !== id) : q);

const MINUTE = 60_000;

/**
 * When the coordinator must next look at this group by itself: an unclaimed grant runs out, a
 * parked entry's wait ends, or — parked hosts, a free slot, not paused, outside every window — the
 * next minute boundary, where any window can open (windows start on whole minutes of the zone's
 * wall clock, and every zone's offset is whole minutes).
 */
export function nextWake(g: GroupState, q: Queue, now: number): number | null {
  let at = Infinity;
  for (const h of g.holders) if (h.unclaimed_until !== undefined) at = Math.min(at, h.unclaimed_until);
  const live = liveEntries(q, now);
  for (const e of q) at = Math.min(at, e.deadline);
  if (live.length > 0 && !g.paused && g.holders.length < g.slots && !withinWindows(g.windows, now)) {
    at = Math.min(at, (Math.floor(now / MINUTE) + 1) * MINUTE);
  }
  return at === Infinity ? null : at;
}
