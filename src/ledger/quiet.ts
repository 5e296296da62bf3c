/**
 * The quiet watch: how the index learns that a host reporting over HTTP went quiet, without a D1
 * write for every few reports. A host on the channel is watched by its socket (its close tells the
 * ledger); a host reporting over HTTP is watched by one timer on the ledger's alarm, due when the
 * host would be stale. While either watches, the host's index row is leased (its stale_at lies a
 * lease beyond last_seen + stale_after, refreshed once a lease: ./projection.ts), so a steady host
 * costs D1 one write a day whichever way it talks.
 *
 * When the timer fires, a host that reported since is watched again from its newest heartbeat (no
 * write anywhere but the timer's row and the alarm); one that did not is told to the index with
 * its exact stale_at (last report + stale_after), which is then in the past (a host whose
 * heartbeats come on its polls after one look more: QuietMark). An alarm lets the ledger hibernate
 * between reports: it is billed as one request when it fires, once per stale_after plus the grace
 * of a steady host.
 */
import type { Scheduler } from "../objects/kit/scheduler";
import type { LedgerStore } from "./store";

export const QUIET_TIMER = "quiet";
/** Due when a host that left the channel turns stale, should it not come back (left, leftFired). */
export const LEFT_TIMER = "left";

/**
 * How old the persisted heartbeat of an unchanged report (PUT /v1/agent/inventory) may get (memory
 * holds the latest): half the fleet's stale_after, at most MAX_HEARTBEAT_PERSIST_MS. A ledger woken
 * from eviction reads it back, so a host that reports more often than that is never seen stale,
 * while a steady host costs a storage row every few reports instead of every one (rows written are
 * billed). The cap keeps the quiet watch's late stale_at within what the cron's server.stale sweep
 * looks back over (src/webhooks/stale.ts, LATE_DEADLINE_MS), whatever the fleet's stale_after.
 * A heartbeat carried by a poll (./report.ts, pollHeartbeat) is not stored on a schedule at all:
 * see QuietMark.
 */
const MAX_HEARTBEAT_PERSIST_MS = 5 * 60_000;

export function heartbeatPersistMs(staleAfterS: number) {
  return Math.min(staleAfterS * 500, MAX_HEARTBEAT_PERSIST_MS);
}

/**
 * The timer fires this long after the host would be stale: a ledger evicted between reports reads
 * back a heartbeat persisted up to heartbeatPersistMs before the newest (and a report period
 * more), and must not take a host that keeps reporting for a quiet one. The index shows a quiet
 * host stale this much late at most (with its exact stale_at), plus confirmMs for a host whose
 * heartbeats came on its polls; the ledger's own view is exact while it holds the heartbeat in
 * memory or in a socket. A restart of the runtime drops both: until the host's next poll its view
 * may read stale, as a channel host's does until it is back.
 */
export const quietGraceMs = (staleAfterS: number) => Math.min(staleAfterS * 1000, MAX_HEARTBEAT_PERSIST_MS);

/**
 * How long a watch in doubt waits for a sign of its host (QuietMark), at most: longer than a live
 * host is ever without a poll in flight (between two polls it reconciles; a poll waits at most
 * MAX_WAIT_S, 60 s, src/domain/limits.ts: twice that), and short enough that the confirmed host
 * reaches the index within LATE_DEADLINE_MS (grace ≤ 5 min, this ≤ 2 min). A literal, not the
 * import: the cost benchmark loads this module in Node as it is (test/poll-heartbeat.test.ts
 * pins it against MAX_WAIT_S).
 */
const MAX_CONFIRM_MS = 2 * 60_000;

/**
 * The doubt's wait for a fleet's stale_after: at most half of stale_after + grace, so a heartbeat
 * heard meanwhile keeps the watch due later than the look it takes then.
 */
export const confirmMs = (staleAfterS: number) =>
  Math.min(MAX_CONFIRM_MS, (staleAfterS * 1000 + quietGraceMs(staleAfterS)) / 2);

/** When the watch of a host last heard at `heardAt` is due: when it would be stale, plus the grace. */
const dueOf = (heardAt: number, staleAfterS: number) => heardAt + staleAfterS * 1000 + quietGraceMs(staleAfterS);

/**
 * What the quiet timer carries. Its row is rewritten whenever the watch moves on, so the mark costs
 * no storage row of its own but the one that first sets `polls`.
 *
 * `polls`: the host's heartbeats come on its polls. They live in the ledger's memory and in the
 * poll's waiter socket, which keeps them through the ledger's eviction, and are not stored (a
 * steady host's storage row every stale_after was half of what an HTTP host cost in rows written).
 * What that leaves uncovered is the host between two polls (its last waiter closed, its next poll
 * not yet in) while the ledger was evicted: when the watch falls due then, the ledger has no sign
 * of the host since it last moved the watch on, as with a host that really went quiet. So it does
 * not tell the index yet: it notes `doubt_since` and looks again confirmMs later, and the first
 * heartbeat heard meanwhile is stored (./report.ts), so a live host is found alive then whatever
 * the ledger forgot. One that sent nothing is told quiet, confirmMs later than it would have been.
 */
interface QuietMark {
  polls?: true;
  doubt_since?: number;
}

export class QuietWatch {
  /** The timer as set (null: not watching); undefined until read once after the ledger woke. */
  private timer: { dueAt: number; mark: QuietMark } | null | undefined;

  private readonly scheduler: Scheduler;
  private readonly store: LedgerStore;

  // Fields, not parameter properties: the cost benchmark loads this module in Node as it is.
  constructor(scheduler: Scheduler, store: LedgerStore) {
    this.scheduler = scheduler;
    this.store = store;
  }

  private read() {
    if (this.timer === undefined) {
      const t = this.scheduler.timer(QUIET_TIMER);
      this.timer = t ? { dueAt: t.dueAt, mark: (t.payload ?? {}) as QuietMark } : null;
    }
    return this.timer;
  }

  private set(dueAt: number, mark: QuietMark) {
    this.scheduler.schedule(QUIET_TIMER, dueAt, Object.keys(mark).length ? mark : null);
    this.timer = { dueAt, mark };
  }

  /** Whether the ledger watches its HTTP host (the index row's staleness is then leased). */
  watching(): boolean {
    return this.read() !== null;
  }

  /**
   * A report over HTTP came in (`viaPoll`: a poll's heartbeat): watch from it, unless already
   * watching (the timer catches up by itself when it fires). True when the timer was set now: the
   * caller arms the alarm.
   */
  watch(receivedAt: number, staleAfterS: number, viaPoll = false): boolean {
    const t = this.read();
    if (t) {
      // The first poll's heartbeat of a watch: from now on the host's heartbeats are not stored.
      if (viaPoll && !t.mark.polls) this.set(t.dueAt, { ...t.mark, polls: true });
      return false;
    }
    this.set(dueOf(receivedAt, staleAfterS), viaPoll ? { polls: true } : {});
    return true;
  }

  /**
   * Whether a poll's heartbeat must be stored: only while the watch is in doubt, and once (the
   * stored report older than the doubt). Otherwise memory and the poll's waiter hold it.
   */
  storesPollHeartbeat(persistedAt: number): boolean {
    const since = this.read()?.mark.doubt_since;
    return since !== undefined && persistedAt < since;
  }

  /** The fleet's stale_after changed: a watch under way is due no later than the new deadline. */
  refit(receivedAt: number, staleAfterS: number) {
    const t = this.read();
    if (!t) return;
    const dueAt = Math.min(t.dueAt, dueOf(receivedAt, staleAfterS));
    if (dueAt < t.dueAt) this.set(dueAt, t.mark);
  }

  /** The host is on the channel: its socket watches it now. */
  stop() {
    if (!this.watching()) return;
    this.scheduler.cancel(QUIET_TIMER);
    this.timer = null;
  }

  /**
   * The host left the channel (its last socket closed): its index row is exact again and turns
   * stale by itself at last heard + stale_after, which nothing else would tell its coordinator's
   * fleet-health gates. One timer, due then; a host back on the channel cancels it (`back`). A
   * host back over HTTP makes it find nothing to do (it is not cancelled on every report: that
   * would be a write per report).
   */
  left(heardAt: number, staleAfterS: number) {
    this.scheduler.schedule(LEFT_TIMER, heardAt + staleAfterS * 1000 + 1_000);
  }

  /**
   * The host is back on the channel: its socket watches it again, and a close sets the timer anew
   * from the heartbeat then. Without this, every reboot left one alarm that woke the ledger to find
   * the host connected. True when a timer was cancelled: the caller moves the alarm back.
   */
  back(): boolean {
    if (this.scheduler.dueAt(LEFT_TIMER) === null) return false;
    this.scheduler.cancel(LEFT_TIMER);
    return true;
  }

  /** The left timer fired: true when the host is stale now (no report since it left, nor a socket). */
  leftFired(now: number, connected: boolean): boolean {
    const state = this.store.load();
    const report = state?.report;
    if (connected || !state || !report || state.record.state === "removed") return false;
    return now - report.received_at > state.record.stale_after_s * 1000;
  }

  /**
   * The timer fired, carrying `payload` (its QuietMark). True when the host went quiet and the index
   * must be told (the timer is then removed by the scheduler after this handler, so the projection
   * is no longer leased); false when it reported since (watched again from its newest heartbeat),
   * when the watch is in doubt now (QuietMark), or when the host is gone.
   */
  fired(now: number, payload: unknown): boolean {
    const state = this.store.load();
    const report = state?.report;
    if (!state || !report || state.record.state === "removed") {
      this.timer = null;
      return false;
    }
    const mark = (payload ?? {}) as QuietMark;
    const due = dueOf(report.received_at, state.record.stale_after_s);
    if (due > now) {
      this.set(due, mark.polls ? { polls: true } : {});
      return false;
    }
    if (mark.polls && mark.doubt_since === undefined) {
      this.set(now + confirmMs(state.record.stale_after_s), { polls: true, doubt_since: now });
      return false;
    }
    this.timer = null;
    return true;
  }
}
