/**
 * The quiet watch: how the index learns that a host reporting over HTTP went quiet, without a D1
 * write for every few reports. A host on the channel is watched by its socket (its close tells the
 * ledger); a host reporting over HTTP is watched by one timer on the ledger's alarm, due when the
 * host would be stale. While either watches, the host's index row is leased (its stale_at lies a
 * lease beyond last_seen + stale_after, refreshed once a lease: ./projection.ts), so a steady host
 * costs D1 one write a day whichever way it talks.
 *
 * When the timer fires, a host that reported since is watched again from its newest heartbeat (no
 * write anywhere but the timer's row); one that did not is told to the index with its exact
 * stale_at (last report + stale_after), which is then in the past. An alarm lets the ledger
 * hibernate between reports: it is billed as one request when it fires, about once per
 * stale_after of a steady host.
 */
import type { Scheduler } from "../objects/kit/scheduler";
import type { LedgerStore } from "./store";

export const QUIET_TIMER = "quiet";
/** Due when a host that left the channel turns stale, should it not come back (left, leftFired). */
export const LEFT_TIMER = "left";

/**
 * How old the persisted heartbeat of an unchanged report may get (memory holds the latest): half
 * the fleet's stale_after, at most MAX_HEARTBEAT_PERSIST_MS. A ledger woken from eviction reads it
 * back, so a host that reports more often than that is never seen stale, while a steady host costs
 * a storage row every few reports instead of every one (rows written are billed). The cap keeps the
 * quiet watch's late stale_at within what the cron's server.stale sweep looks back over
 * (src/webhooks/stale.ts, LATE_DEADLINE_MS), whatever the fleet's stale_after.
 */
const MAX_HEARTBEAT_PERSIST_MS = 5 * 60_000;

export function heartbeatPersistMs(staleAfterS: number) {
  return Math.min(staleAfterS * 500, MAX_HEARTBEAT_PERSIST_MS);
}

/**
 * The same for a heartbeat carried by a poll (./report.ts, pollHeartbeat): twice as long, because
 * the poll's waiter keeps it too (./waits.ts), and a ledger woken while its host polls reads it
 * back from there. Only a ledger evicted between two polls falls back on the persisted one.
 */
export function pollHeartbeatPersistMs(staleAfterS: number) {
  return Math.min(staleAfterS * 1000, MAX_HEARTBEAT_PERSIST_MS);
}

/**
 * The timer fires this long after the host would be stale: a ledger evicted between reports reads
 * back a heartbeat persisted up to pollHeartbeatPersistMs (the longer of the two) before the
 * newest, and must not take a host that keeps reporting for a quiet one. The index shows a quiet
 * host stale this much late at most (with its exact stale_at); the ledger's own view is exact
 * while it holds the heartbeat in memory or in a socket. A restart of the runtime drops both: until
 * the host's next poll its view may read stale, as a channel host's does until it is back.
 */
export const quietGraceMs = (staleAfterS: number) => pollHeartbeatPersistMs(staleAfterS);

/** When the watch of a host last heard at `heardAt` is due: when it would be stale, plus the grace. */
const dueOf = (heardAt: number, staleAfterS: number) => heardAt + staleAfterS * 1000 + quietGraceMs(staleAfterS);

export class QuietWatch {
  /** Whether the timer is set; undefined until read once after the ledger woke. */
  private armed: boolean | undefined;

  private readonly scheduler: Scheduler;
  private readonly store: LedgerStore;

  // Fields, not parameter properties: the cost benchmark loads this module in Node as it is.
  constructor(scheduler: Scheduler, store: LedgerStore) {
    this.scheduler = scheduler;
    this.store = store;
  }

  /** Whether the ledger watches its HTTP host (the index row's staleness is then leased). */
  watching(): boolean {
    this.armed ??= this.scheduler.dueAt(QUIET_TIMER) !== null;
    return this.armed;
  }

  /**
   * A report over HTTP came in: watch from it, unless already watching (the timer catches up by
   * itself when it fires). True when the timer was set now: the caller arms the alarm.
   */
  watch(receivedAt: number, staleAfterS: number): boolean {
    if (this.watching()) return false;
    this.scheduler.schedule(QUIET_TIMER, dueOf(receivedAt, staleAfterS));
    this.armed = true;
    return true;
  }

  /** The fleet's stale_after changed: a watch under way is due no later than the new deadline. */
  refit(receivedAt: number, staleAfterS: number) {
    if (!this.watching()) return;
    this.scheduler.schedule(QUIET_TIMER, dueOf(receivedAt, staleAfterS), null, { noLaterThan: true });
  }

  /** The host is on the channel: its socket watches it now. */
  stop() {
    if (this.watching() === false) return;
    this.scheduler.cancel(QUIET_TIMER);
    this.armed = false;
  }

  /**
   * The host left the channel (its last socket closed): its index row is exact again and turns
   * stale by itself at last heard + stale_after, which nothing else would tell its coordinator's
   * fleet-health gates. One timer, due then; a host back meanwhile makes it find nothing to do
   * (it is not cancelled on every report: that would be a write per report).
   */
  left(heardAt: number, staleAfterS: number) {
    this.scheduler.schedule(LEFT_TIMER, heardAt + staleAfterS * 1000 + 1_000);
  }

  /** The left timer fired: true when the host is stale now (no report since it left, nor a socket). */
  leftFired(now: number, connected: boolean): boolean {
    const state = this.store.load();
    const report = state?.report;
    if (connected || !state || !report || state.record.state === "removed") return false;
    return now - report.received_at > state.record.stale_after_s * 1000;
  }

  /**
   * The timer fired. True when the host went quiet and the index must be told (the timer is then
   * removed by the scheduler after this handler, so the projection is no longer leased); false
   * when it reported since (watched again from its newest heartbeat) or is gone.
   */
  fired(now: number): boolean {
    const state = this.store.load();
    const report = state?.report;
    if (!state || !report || state.record.state === "removed") {
      this.armed = false;
      return false;
    }
    const due = dueOf(report.received_at, state.record.stale_after_s);
    if (due > now) {
      this.scheduler.schedule(QUIET_TIMER, due);
      this.armed = true;
      return false;
    }
    this.armed = false;
    return true;
  }
}
