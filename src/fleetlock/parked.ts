/**
 * The queue of parked pre-reboots, applied: queue.ts decides, this stores the decisions, answers
 * the hosts still connected and keeps the queue's one timer. A queue entry is durable (the store);
 * the parked call is not — it is the open connection, parked in memory. A host with no call left
 * (it went away, or the object restarted under it) keeps its place; if its turn comes, its grant
 * is kept unclaimed for it (queue.ts UNCLAIMED_GRANT_S).
 */
import { Parking } from "../objects/kit/park";
import type { Scheduler } from "../objects/kit/scheduler";
import { hostAudit, type CoordinatorEffects } from "./effects";
import { rebootGranted, rebootReleased } from "./reboot-events";
import { closureOf, dequeue, drain, liveEntries, nextWake, queuedOf, releaseUnclaimed, type Answer, type Closure, type QueueEntry } from "./queue";
import type { GroupState } from "./semaphore";
import type { CoordinatorStore } from "./store";

/** The scheduler's timer for the queue: unclaimed grants running out, waits ending, windows opening. */
export const QUEUE_TIMER = "queue";

/**
 * How a parked call is answered; a refused host is told why by the caller, from the group as it is
 * then. `removed`: its id no longer belongs to a server of the fleet (the server was removed, or
 * its fleetlock_id changed), so it left the queue.
 */
export type ParkedAnswer = "granted" | "refused" | "removed" | "dequeued";

/** Why a group grants nothing new now, gates included; null when open. */
export type ClosedFn = (name: string, g: GroupState, now: number) => Closure | null;

/** What the health gates add to the queue (./gate-keeper.ts): their closure, their wake-ups, their notes. */
export interface QueueHooks {
  closed: ClosedFn;
  /** When the group must be looked at by itself besides the queue's own reasons (a hold lifting). */
  wakeAt: (name: string, g: GroupState, now: number) => number | null;
  /** After each drain: the group as it now is (gate changes are noted here). */
  drained: (name: string, g: GroupState, now: number) => void;
  /** Before each drain: what is due in the group besides the queue's own (health time-outs). */
  tidy: (name: string, g: GroupState, now: number) => GroupState;
  /** When the group must be looked at by itself whoever waits (a health time-out, a holder becoming stuck); Infinity: never. */
  dueAt: (g: GroupState) => number | null;
}

export class ParkedHosts {
  private readonly calls = new Parking<ParkedAnswer>();
  /** When each id's newest waiting call parked (decision clock): how long the runtime vouches for it. */
  private readonly parkedAt = new Map<string, number>();
  /** When the queue timer is set for; undefined until the first look after a wake. */
  private timerAt: number | null | undefined;
  /** Gates add theirs here (./durable-object.ts wires ./gate-keeper.ts); by default pause, windows and slots decide. */
  hooks: QueueHooks = { closed: (_name, g, now) => closureOf(g, now), wakeAt: () => null, drained: () => {}, tidy: (_n, g) => g, dueAt: () => null };

  constructor(
    private readonly store: CoordinatorStore,
    private readonly effects: CoordinatorEffects,
    private readonly scheduler: Scheduler,
    private readonly clock: () => number,
    /**
     * How long a parked call is believed to still have its client where the runtime cannot report
     * a hang-up (PARK_TRUST_S; wrangler dev's proxy never aborts request.signal); null: it can.
     */
    private readonly trustMs: number | null = null,
  ) {}

  /** Whether a call of the id is still waiting here (operators see it as `connected`). */
  connected(id: string) {
    return this.calls.has(id);
  }

  /**
   * Parks the call until the entry's deadline; several calls of one id wait for the same entry.
   * When the wait runs out the host leaves the queue and every call of it is refused.
   */
  wait(group: string, entry: QueueEntry, now: number, ticket?: string): Promise<ParkedAnswer> {
    this.parkedAt.set(entry.id, now);
    const answer = this.calls.park(entry.id, entry.deadline - now, "refused", () => this.expire(group, entry.id), ticket);
    return answer.finally(() => {
      if (!this.calls.has(entry.id)) this.parkedAt.delete(entry.id);
    });
  }

  /** How a grant made now would reach the id's host. */
  private answerOf(id: string, now: number): Answer {
    if (!this.calls.has(id)) return "gone";
    const at = this.parkedAt.get(id);
    if (this.trustMs !== null && at !== undefined && now - at > this.trustMs) return "provisional";
    return "live";
  }

  /**
   * The id no longer belongs to a server of the fleet (removed, or renamed): it leaves every
   * queue, and its waiting calls are answered at once. Nothing may be granted to it later.
   */
  forget(id: string) {
    for (const [name, q] of this.store.queues()) {
      if (queuedOf(q, id)) this.store.saveQueue(name, dequeue(q, id));
    }
    this.calls.settle(id, "removed");
  }

  /** An operator took the host out of the queue: it leaves, and its waiting calls are refused. */
  dequeue(name: string, id: string): QueueEntry | null {
    const q = this.store.queue(name);
    const entry = queuedOf(q, id);
    if (!entry) return null;
    this.store.saveQueue(name, dequeue(q, id));
    this.calls.settle(id, "dequeued");
    return entry;
  }

  /** The edge saw the call's client go away: it stops waiting, the id keeps its place. */
  leave(id: string, ticket: string) {
    return this.calls.leave(id, ticket, "refused");
  }

  /** A host at steady state is not waiting to reboot: it gives up its place, if it had one. */
  giveUp(id: string) {
    for (const [name, q] of this.store.queues()) {
      if (!queuedOf(q, id)) continue;
      this.store.saveQueue(name, dequeue(q, id));
      this.calls.settle(id, "refused");
    }
  }

  /** The queue timer fired (and is gone): look at every group, and set it anew. */
  async fired() {
    this.timerAt = undefined;
    await this.drainAll();
  }

  async drainAll() {
    for (const [name] of this.store.groups()) await this.drain(name);
  }

  /**
   * Frees what is due in a group (unclaimed grants past their bound), then hands free slots to
   * parked hosts in FIFO order; hosts still connected are answered 200, and the output gate holds
   * each answer until the grant is durable. Grants and releases are audited like any other.
   */
  async drain(name: string) {
    const stored = this.store.group(name);
    if (!stored) return;
    const now = this.clock();
    const g = this.hooks.tidy(name, stored, now);
    const freed = releaseUnclaimed(g, now);
    const config = this.store.config;
    const d = drain(freed.group, this.store.queue(name), now, (id) => this.answerOf(id, now), {
      holdsElsewhere: (id) => {
        const held = this.store.heldIn(id);
        return held !== undefined && held !== name;
      },
      // A removed server's host (or a renamed id) is never granted, whatever order the news came in.
      eligible: (e) => (e.server_id ? this.store.clients.get(e.id)?.server_id === e.server_id : Boolean(config?.allow_unknown_ids)),
      closed: (x) => this.hooks.closed(name, x, now),
    });
    this.store.saveGroup(name, d.group);
    this.store.saveQueue(name, d.queue);
    for (const e of d.dropped) this.calls.settle(e.id, "removed");
    for (const h of freed.released) rebootReleased(this.effects, this.store, name, h, "unclaimed", now);
    for (const { entry, answerable } of d.granted) rebootGranted(this.effects, this.store, name, entry, now, { queued_since: new Date(entry.since).toISOString(), answered: answerable });
    this.hooks.drained(name, d.group, now);
    for (const { entry, answerable } of d.granted) if (answerable) this.calls.settle(entry.id, "granted");
    const rearm = this.armTimer(now);
    const fleetId = this.store.config?.fleet_id;
    await this.effects.audit(
      [
        ...freed.released.map((h) => hostAudit(fleetId, "fleetlock.release_unclaimed", h.id, h.server_id, { group: name })),
        ...d.granted.map(({ entry, answerable, provisional }) =>
          hostAudit(fleetId, "fleetlock.grant", entry.id, entry.server_id, {
            group: name,
            queued_since: new Date(entry.since).toISOString(),
            answered: answerable,
            ...(provisional ? { provisional: true } : {}),
          }),
        ),
      ],
      { wait: false },
    );
    if (rearm) await this.scheduler.arm();
  }

  /** A parked host's wait ran out: it leaves the queue and is answered with the group's refusal. */
  private expire(name: string, id: string) {
    this.store.saveQueue(name, dequeue(this.store.queue(name), id));
    this.calls.settle(id, "refused");
    if (this.armTimer(this.clock())) void this.scheduler.arm().catch(() => undefined);
  }

  /**
   * Keeps the queue's one timer at the earliest moment any group needs a look with no request to
   * prompt it. The timer runs on real time while decisions use `clock`, so the distance is kept.
   */
  /** Keeps the queue timer right after a change made outside a drain (a hold set or lifted). */
  async rearm() {
    if (this.armTimer(this.clock())) await this.scheduler.arm();
  }

  private armTimer(now: number): boolean {
    let at = Infinity;
    for (const [name, g] of this.store.groups()) {
      at = Math.min(at, nextWake(g, this.store.queue(name), now) ?? Infinity, this.hooks.dueAt(g) ?? Infinity);
      // A hold lifting matters only to hosts waiting behind it.
      if (liveEntries(this.store.queue(name), now).length) at = Math.min(at, this.hooks.wakeAt(name, g, now) ?? Infinity);
    }
    if (at === Infinity) {
      // Unknown after a wake (undefined): cancel once, in case a timer was left from before.
      if (this.timerAt !== null) this.scheduler.cancel(QUEUE_TIMER);
      this.timerAt = null;
      return false;
    }
    const due = Date.now() + Math.max(0, at - now);
    if (due === this.timerAt) return false;
    this.scheduler.schedule(QUEUE_TIMER, due);
    this.timerAt = due;
    return true;
  }
}
