/**
 * The queue of parked pre-reboots, applied: queue.ts decides, this stores the decisions, answers
 * the hosts still waiting and keeps the queue's one timer. A queue entry is durable (the store);
 * the wait is not held here. The Worker holds the host's request and a hibernatable waiter socket
 * to this object (src/objects/kit/wake.ts, ./waits.ts), tagged with the host's id and carrying
 * when it parked; the object sleeps meanwhile, and the decision that answers the host (a grant
 * from a drain, a refusal at the deadline, a removal, an operator's dequeue) wakes the waiter with
 * the answer. A host with no waiter left (its client went away, or the coordinator restarted under
 * it) keeps its place; if its turn comes, its grant is kept unclaimed for it (queue.ts
 * UNCLAIMED_GRANT_S). Deadlines need no timer in memory: the scheduler's alarm (QUEUE_TIMER) and
 * the waiting Worker's look at the deadline both end them.
 */
import { attachmentOf, closeSocket, type SocketRoom } from "../objects/kit/sockets";
import { acceptWaiter, answerWaiters } from "../objects/kit/wake";
import { audit, hostAudit, type Outgoing } from "./effects";
import type { FleetLockKind } from "../domain/enums";
import { rebootGranted, rebootReleased } from "./reboot-events";
import {
  dequeue,
  drain,
  liveEntries,
  nextWake,
  queuedOf,
  readDone,
  refusalValue,
  releaseUnclaimed,
  type Answer,
  type Closure,
  type QueueEntry,
} from "./queue";
import type { GroupState } from "./semaphore";
import type { CoordinatorStore } from "./store";

/** The scheduler's timer for the queue: unclaimed grants running out, waits ending, windows opening. */
export const QUEUE_TIMER = "queue";

/**
 * Why a waiting host is answered without a slot. `removed`: its id no longer belongs to a server of
 * the fleet (the server was removed, or its fleetlock_id changed), so it left the queue.
 */
type Refused = "refused" | "removed" | "dequeued";

/** What a parked host is answered, as the Worker returns it. */
export type ParkedAnswer = { ok: true } | Failure;

/** What a waiter socket holds (its attachment, kept across an eviction): whose wait, and since when. */
interface Waiter {
  id: string;
  group: string;
  /** When it parked, on the decision clock: how long the runtime vouches for it (PARK_TRUST_S). */
  at: number;
}

/** As ./protocol.ts's FleetLockFailure (not imported: that module's schemas reach back to the coordinator's parts). */
type Failure = { ok: false; kind: FleetLockKind; value: string };
const failure = (kind: FleetLockKind, value: string): Failure => ({ ok: false, kind, value });

/** The tag of a host's waiters: the object finds them again after an eviction. */
const hostTag = (id: string) => `host:${id}`;

/** Why a group grants nothing new now, gates included; null when open. */
type ClosedFn = (name: string, g: GroupState, now: number) => Closure | null;

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
  /** Why the fleet's disruption budget refuses a server now (counting `extra` as granted), or null. */
  budget: (serverId: string | null, extra: readonly string[]) => Closure | null;
}

export class ParkedHosts {
  /** Waiters seen closing in this wake (the runtime may still list them meanwhile). */
  private readonly gone = new WeakSet<WebSocket>();
  /** When the queue timer is set for; undefined until the first look after a wake. */
  private timerAt: number | null | undefined;

  constructor(
    /** The store, and what sends: grants and releases are audited and reported from here. */
    private readonly o: Outgoing,
    /** The decision clock (the parts' own, read at each call: tests move it). */
    private readonly clock: () => number,
    private readonly room: SocketRoom,
    /** What the health gates add (./gate-keeper.ts, wired by ./assemble.ts). */
    private readonly hooks: QueueHooks,
    /**
     * How long a waiting host is believed to still have its client where the runtime cannot report
     * a hang-up (PARK_TRUST_S; wrangler dev's proxy never aborts request.signal, so the Worker never
     * closes the waiter); null: it can.
     */
    private readonly trustMs: number | null = null,
  ) {}

  private get store(): CoordinatorStore {
    return this.o.store;
  }

  /** The id's waiters still open. */
  private waiters(id: string) {
    return this.room.list(hostTag(id)).filter((ws) => !this.gone.has(ws) && ws.readyState === WebSocket.OPEN);
  }

  /** Whether a request of the id still waits (operators see it as `connected`): a waiter socket is open. */
  connected(id: string) {
    return this.waiters(id).length > 0;
  }

  /**
   * Hands the Worker a waiter for the id's place, asked to look again at the entry's deadline (in
   * real time: the decision clock may be moved in tests). Called in the turn that stored the place.
   */
  hold(name: string, entry: QueueEntry, now: number): Response {
    return acceptWaiter(
      this.room,
      { id: entry.id, group: name, at: now } satisfies Waiter,
      this.o.scheduler.now() + Math.max(0, entry.deadline - now),
      [hostTag(entry.id)],
    );
  }

  /**
   * A waiter closed: its Worker's client went away (the edge saw the hang-up), or it was answered.
   * The id keeps its place; a grant made for it now is kept unclaimed.
   */
  closed(ws: WebSocket) {
    this.gone.add(ws);
    closeSocket(ws, 1000, "closed");
  }

  /** How a grant made now would reach the id's host; `present`: a host in the call being decided. */
  private answerOf(id: string, now: number, present?: { id: string; at: number }): Answer {
    const since = this.waiters(id).map((ws) => attachmentOf<Waiter>(ws).at);
    if (present?.id === id) since.push(present.at);
    if (since.length === 0) return "gone";
    if (this.trustMs !== null && now - Math.max(...since) > this.trustMs) return "provisional";
    return "live";
  }

  /** Wakes the id's waiters with the answer (sent once the turn's writes are durable: output gate). */
  private answer(id: string, answer: ParkedAnswer) {
    answerWaiters(this.room, hostTag(id), answer);
  }

  /** The failure a host of the group is told when it waited without a slot, from the group as it is now. */
  refusal(name: string, id: string, why: Refused): ParkedAnswer {
    if (why === "removed")
      return failure("unknown_client", `'${id}' no longer belongs to a server of this fleet; it left the queue`);
    // A slot it holds anywhere answers it (recursive lock).
    if (this.store.heldIn(id)) return { ok: true };
    const g = this.store.group(name);
    const closed = (g && this.hooks.closed(name, g, this.clock())) ??
      this.hooks.budget(this.store.clients.get(id)?.server_id ?? null, []) ?? {
        kind: "semaphore_full" as const,
        value: refusalValue.semaphore_full,
      };
    if (why === "dequeued") return failure(closed.kind, `${closed.value}; an operator took this host out of the queue`);
    return failure(closed.kind, `${closed.value}; waited ${g?.queue_wait_s ?? 0} s in the queue`);
  }

  /**
   * The id no longer belongs to a server of the fleet (removed, or renamed): it leaves every
   * queue, and its waiters are answered at once. Nothing may be granted to it later.
   */
  forget(id: string) {
    for (const [name, q] of this.store.queues()) {
      if (queuedOf(q, id)) this.store.saveQueue(name, dequeue(q, id));
    }
    this.answer(id, this.refusal("", id, "removed"));
  }

  /** An operator took the host out of the queue: it leaves, and its waiting requests are refused. */
  dequeue(name: string, id: string): QueueEntry | null {
    const q = this.store.queue(name);
    const entry = queuedOf(q, id);
    if (!entry) return null;
    this.store.saveQueue(name, dequeue(q, id));
    this.answer(id, this.refusal(name, id, "dequeued"));
    return entry;
  }

  /** A host at steady state is not waiting to reboot: it gives up its place, if it had one. */
  giveUp(id: string) {
    for (const [name, q] of this.store.queues()) {
      if (!queuedOf(q, id)) continue;
      this.store.saveQueue(name, dequeue(q, id));
      this.answer(id, this.refusal(name, id, "refused"));
    }
  }

  /**
   * The id's place ran out before the queue timer removed it (a resumed request looked first): it
   * leaves the queue and every waiter of it is refused. Returns that refusal, or null if no lapsed place.
   */
  expire(name: string, id: string, now: number): ParkedAnswer | null {
    const q = this.store.queue(name);
    const entry = queuedOf(q, id);
    if (!entry || entry.deadline > now) return null;
    this.store.saveQueue(name, dequeue(q, id));
    const refused = this.refusal(name, id, "refused");
    this.answer(id, refused);
    return refused;
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
   * Frees what is due in a group (unclaimed grants past their bound, places past their deadline),
   * then hands free slots to parked hosts in FIFO order; hosts still waiting are woken with 200,
   * and the output gate holds each wake until the grant is durable. Grants and releases are
   * audited like any other. `present`: the host whose own call runs this drain (it has no waiter
   * yet). Everything up to the first await runs in the caller's turn.
   */
  async drain(name: string, present?: { id: string; at: number }) {
    const stored = this.store.group(name);
    if (!stored) return;
    const now = this.clock();
    const g = this.hooks.tidy(name, stored, now);
    const freed = releaseUnclaimed(g, now);
    const config = this.store.config;
    const lapsed = this.store.queue(name).filter((e) => e.deadline <= now);
    const d = drain(freed.group, this.store.queue(name), now, (id) => this.answerOf(id, now, present), {
      holdsElsewhere: (id) => {
        const held = this.store.heldIn(id);
        return held !== undefined && held !== name;
      },
      // A removed server's host (or a renamed id) is never granted, whatever order the news came in.
      eligible: (e) =>
        e.server_id ? this.store.clients.get(e.id)?.server_id === e.server_id : Boolean(config?.allow_unknown_ids),
      closed: (x) => this.hooks.closed(name, x, now),
      budgetRefuses: (e, granted) => this.hooks.budget(e.server_id, granted) !== null,
    });
    // Hosts parked only while a gate's input was read are answered once it is in.
    const read = readDone(d.group, d.queue, now, this.hooks.closed(name, d.group, now));
    this.store.saveGroup(name, d.group);
    this.store.saveQueue(name, read.queue);
    for (const e of lapsed) if (!queuedOf(d.queue, e.id)) this.answer(e.id, this.refusal(name, e.id, "refused"));
    for (const e of read.done) this.answer(e.id, this.refusal(name, e.id, "refused"));
    for (const e of d.dropped) this.answer(e.id, this.refusal(name, e.id, "removed"));
    for (const h of freed.released) rebootReleased(this.o, name, h, "unclaimed", now);
    for (const { entry, answerable } of d.granted)
      rebootGranted(this.o, name, entry, now, {
        queued_since: new Date(entry.since).toISOString(),
        answered: answerable,
      });
    this.hooks.drained(name, d.group, now);
    for (const { entry, answerable } of d.granted) if (answerable) this.answer(entry.id, { ok: true });
    const rearm = this.armTimer(now);
    const fleetId = this.store.config?.fleet_id;
    await audit(
      this.o,
      [
        ...freed.released.map((h) =>
          hostAudit(fleetId, "fleetlock.release_unclaimed", h.id, h.server_id, { group: name }),
        ),
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
    if (rearm) await this.o.scheduler.arm();
  }

  /** Keeps the queue timer right after a change made outside a drain (a hold set or lifted). */
  async rearm() {
    if (this.armTimer(this.clock())) await this.o.scheduler.arm();
  }

  /**
   * Keeps the queue's one timer at the earliest moment any group needs a look with no request to
   * prompt it. The timer runs on real time while decisions use `clock`, so the distance is kept.
   */
  private armTimer(now: number): boolean {
    let at = Infinity;
    for (const [name, g] of this.store.groups()) {
      at = Math.min(at, nextWake(g, this.store.queue(name), now) ?? Infinity, this.hooks.dueAt(g) ?? Infinity);
      // A hold lifting matters only to hosts waiting behind it.
      if (liveEntries(this.store.queue(name), now).length)
        at = Math.min(at, this.hooks.wakeAt(name, g, now) ?? Infinity);
    }
    if (at === Infinity) {
      // Unknown after a wake (undefined): cancel once, in case a timer was left from before.
      if (this.timerAt !== null) this.o.scheduler.cancel(QUEUE_TIMER);
      this.timerAt = null;
      return false;
    }
    const due = this.o.scheduler.now() + Math.max(0, at - now);
    // Kept when earlier than needed: it fires, finds nothing due and is set again then. Moved
    // later on every release (the next holder to become stuck), it would write a row a request.
    if (this.timerAt !== undefined && this.timerAt !== null && this.timerAt <= due) return false;
    this.o.scheduler.schedule(QUEUE_TIMER, due);
    this.timerAt = due;
    return true;
  }
}
