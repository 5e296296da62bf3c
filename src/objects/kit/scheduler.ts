/**
 * Many named timers on a Durable Object's single alarm. Timers live in the object's own SQLite
 * storage, so a timer set in the same turn as a state change commits with it; the alarm is always
 * the earliest due timer (or earlier), so arming one timer can never postpone another — except
 * under a caller's `holdAlarm`, which keeps a set alarm for timers due before it, up to a bound the
 * caller chose, until its next `trim`.
 */

import { kitTable } from "./tables";

export type TimerHandler = (payload: unknown, name: string) => Promise<void> | void;

/** When a handler throws, its timer fires again after this long (handlers are idempotent). */
const TIMER_RETRY_MS = 5_000;

/** How late an alarm may be in firing before the scheduler stops trusting that it will. */
const LATE_ALARM_MS = 30_000;

export class Scheduler {
  /** The alarm this object last set; undefined until read once after the object woke. */
  private armedAt: number | null | undefined;
  /**
   * The earliest time a timer was set for since `arm` last looked at the table: while the alarm
   * is no later than that, every timer is still at or after it, and `arm` has nothing to read.
   */
  private setSince = Infinity;
  private readonly table;
  /**
   * Every timer row as stored, read in one statement by `preload` (an object that keeps a few
   * timers, as it wakes), and answered from until this instance writes a timer: `timer` and
   * `earliest` are then no statement of their own. Dropped before every write (set, cancel, fire),
   * so a write rolled back leaves nothing stale; no one else writes the table.
   */
  private rows: Map<string, { due_at: number; payload: string | null }> | null = null;
  /**
   * While `fire` runs a handler: the timers set meanwhile, each with the time it asked for as if
   * the fired row were gone. One set again to the very time that fired leaves its row as it was,
   * and `fire` must not remove it as done; one set "no later than" a later time leaves it too, and
   * `fire` moves it there (left at the spent time, the alarm would fire again at once).
   */
  private setWhileFiring: Map<string, number> | null = null;
  /**
   * While set (`holdAlarm`, until the next `trim` or the alarm firing): the alarm as it stands, if
   * due no later than this, is kept for timers set earlier than it. Their delivery after a crash
   * is then at most that late; without a crash the caller's own flush and `trim` come first.
   */
  private heldUntil: number | null = null;

  /**
   * Per timer, an upper bound on its stored due time and the payload stored with it, when this
   * instance knows them: an ask to fire it no later than a time at or after the bound, with the
   * same payload, would move nothing, and is not sent (an outbox asks at every enqueue). Learnt
   * only once the write that made it true committed (`onCommit`: a rolled-back turn teaches
   * nothing), unless a forget came between the ask and the commit; forgotten at once by whatever
   * may move the row later or remove it (a plain ask, a cancel, the timer firing), since forgetting is always
   * safe. Without `onCommit` nothing is learnt. In memory: empty after a restart.
   */
  private readonly known = new Map<string, { atMost: number; payload: string }>();
  /**
   * Counts the forgets, so a commit hook queued before one does not teach what it undid: of every
   * timer at once (`forgotAll`), and per timer (another timer's forget says nothing of this one).
   */
  private forgotAll = 0;
  private readonly forgot = new Map<string, number>();

  constructor(
    private readonly storage: DurableObjectStorage,
    /**
     * Runs `fn` once the caller's outermost transaction committed (at once outside one), and never
     * if it rolled back: the object's store's hook (the ledger's `LedgerStore.onCommit`).
     */
    private readonly onCommit?: (fn: () => void) => void,
  ) {
    this.table = kitTable(
      storage,
      "_timers",
      // WITHOUT ROWID: the name is the row's key, so setting a new timer writes one row, not the
      // row and an index of its name (each billed). An object made before keeps its table as it is.
      "CREATE TABLE IF NOT EXISTS _timers (name TEXT PRIMARY KEY, due_at INTEGER NOT NULL, payload TEXT) WITHOUT ROWID",
      onCommit,
    );
  }

  /**
   * The alarm's time: real time, which every timer is set in and other objects agree on. An
   * object's decisions read its parts' clock instead (a test may move that one; nothing moves the
   * runtime's alarm), and a timer for a decision-clock instant keeps its distance from now.
   */
  now(): number {
    return Date.now();
  }

  /**
   * Sets (or moves) the timer `name` to fire at `dueAt`. Synchronous: commits with the caller's
   * turn. `noLaterThan`: only bring an existing timer forward, never push it back.
   */
  schedule(name: string, dueAt: number, payload: unknown = null, opts: { noLaterThan?: boolean } = {}) {
    const due = opts.noLaterThan ? "MIN(due_at, excluded.due_at)" : "excluded.due_at";
    // A timer that would not move is not rewritten: each row an UPDATE touches is billed as
    // written, and the outbox sets its timer after every enqueue and every flush.
    const moves = opts.noLaterThan ? "excluded.due_at < due_at" : "excluded.due_at IS NOT due_at";
    const at = Math.floor(dueAt);
    const text = JSON.stringify(payload);
    this.setSince = Math.min(this.setSince, at);
    const asked = this.setWhileFiring?.get(name);
    this.setWhileFiring?.set(name, opts.noLaterThan && asked !== undefined ? Math.min(asked, at) : at);
    // A plain ask may move the row later: what was known of it stops holding now, not at the
    // commit, or a "no later than" ask later in the same turn would be skipped against it.
    if (!opts.noLaterThan) this.forget(name);
    const known = this.known.get(name);
    if (opts.noLaterThan && known !== undefined && known.atMost <= at && known.payload === text) return;
    this.rows = null;
    this.table.write(() =>
      this.storage.sql.exec(
        `INSERT INTO _timers (name, due_at, payload) VALUES (?, ?, ?) ON CONFLICT(name) DO UPDATE SET due_at = ${due}, payload = excluded.payload
       WHERE ${moves} OR excluded.payload IS NOT payload`,
        name,
        at,
        text,
      ),
    );
    if (!this.onCommit) return;
    const all = this.forgotAll;
    const one = this.forgot.get(name);
    this.onCommit(() => {
      if (this.forgotAll !== all || this.forgot.get(name) !== one) return;
      // Applied in the order asked: a bound learnt by an earlier ask of the same turn still holds.
      const before = this.known.get(name);
      const bound = opts.noLaterThan && before !== undefined ? Math.min(before.atMost, at) : at;
      this.known.set(name, { atMost: bound, payload: text });
    });
  }

  /** What this instance knows of a timer no longer holds (its row may have moved later or gone). */
  private forget(name?: string) {
    // Nothing is learnt without the hook, and the counts of an object with a timer per name (a
    // coordinator's hostnames) would only grow.
    if (!this.onCommit) return;
    if (name === undefined) {
      this.forgotAll++;
      this.known.clear();
      // Every count is stale against the new epoch: none is needed to tell a hook's turn apart.
      this.forgot.clear();
    } else {
      this.forgot.set(name, (this.forgot.get(name) ?? 0) + 1);
      this.known.delete(name);
    }
  }

  cancel(name: string) {
    this.forget(name);
    this.rows = null;
    if (!this.table.exists()) return;
    this.storage.sql.exec("DELETE FROM _timers WHERE name = ?", name);
  }

  /**
   * Reads every timer in one statement, for `timer` and `earliest` to answer from until the next
   * write: for an object with a few timers (a ledger's: its outbox, its quiet watch, its host that
   * left), whose wake asks for one by name and then for the earliest, two statements otherwise.
   */
  preload() {
    this.rows = new Map(
      this.table
        .read(
          () =>
            this.storage.sql
              .exec<{ name: string; due_at: number; payload: string | null }>(
                "SELECT name, due_at, payload FROM _timers",
              )
              .toArray(),
          [],
        )
        .map((r) => [r.name, r]),
    );
  }

  dueAt(name: string): number | null {
    return this.timer(name)?.dueAt ?? null;
  }

  /** The timer `name` as set (when due, and its payload), or null. One row read, as `dueAt`. */
  timer(name: string): { dueAt: number; payload: unknown } | null {
    const row = this.rows
      ? this.rows.get(name)
      : this.table.read(
          () =>
            this.storage.sql
              .exec<{ due_at: number; payload: string | null }>(
                "SELECT due_at, payload FROM _timers WHERE name = ?",
                name,
              )
              .toArray()[0],
          undefined,
        );
    return row ? { dueAt: row.due_at, payload: row.payload == null ? null : JSON.parse(row.payload) } : null;
  }

  private earliest(): number | null {
    if (this.rows) {
      let at: number | null = null;
      for (const r of this.rows.values()) if (at === null || r.due_at < at) at = r.due_at;
      return at;
    }
    return this.table.read(
      () => this.storage.sql.exec<{ at: number | null }>("SELECT MIN(due_at) AS at FROM _timers").one().at,
      null,
    );
  }

  /**
   * Makes the alarm fire no later than the earliest timer. An alarm that is earlier than needed is
   * left alone (it fires, finds nothing due and re-arms), which keeps steady traffic from
   * rewriting the alarm on every call.
   */
  async arm() {
    // An alarm time long past has fired, or the runtime gave it up after its retries (a handler
    // that kept throwing): it promises no next wake, so the alarm is set again. The grace keeps
    // an alarm merely late in being delivered from being rewritten by every request meanwhile.
    if (this.armedAt != null && this.armedAt <= this.now() - LATE_ALARM_MS) this.armedAt = null;
    // The common case on a busy path (a timer set later than the alarm already is): no row read.
    // Moving a timer later or cancelling one only makes the earliest later, so it needs no look.
    if (this.armedAt !== undefined && this.armedAt !== null && this.armedAt <= this.setSince) {
      this.setSince = Infinity;
      return;
    }
    this.setSince = Infinity;
    const next = this.earliest();
    if (next === null) return;
    if (this.armedAt === undefined) {
      const stored = await this.storage.getAlarm();
      // An alarm already in the past when the object wakes is not trusted to fire: after a crash
      // (kill -9 between the runtime forgetting a fired alarm and the object's own record of it)
      // the object can read back a time that nothing will ever fire at, and every timer behind it
      // — an outbox retry included — would wait forever. Setting it again costs one write.
      this.armedAt = stored !== null && stored <= Date.now() ? null : stored;
    }
    if (this.armedAt !== null && this.armedAt <= next) return;
    if (
      this.heldUntil !== null &&
      this.armedAt !== null &&
      this.armedAt > this.now() &&
      this.armedAt <= this.heldUntil
    ) {
      // Kept, though later than `next`: the next plain `arm` after the hold reads the table again.
      this.setSince = Math.min(this.setSince, next);
      return;
    }
    this.armedAt = next;
    await this.storage.setAlarm(next);
  }

  /**
   * Keeps the alarm where it is, if due by `until`, for the timers set from now until the next
   * `trim` (or the alarm firing), rather than bringing it forward for each: for a caller that set
   * the alarm for a reason of its own (a rollout's write, its rows left to the host's report) and
   * whose flush and `trim` follow the timers it expects (the report's effects, delivered by the
   * report's own flush). A timer set meanwhile is stored in its caller's turn as always; after a
   * kill -9 before that flush, the kept alarm fires by `until` and fires it then, that much late.
   */
  holdAlarm(until: number) {
    this.heldUntil = until;
  }

  /**
   * Moves an alarm set earlier than every timer back to the earliest one, or removes it when no
   * timer is left: for a caller that knows the reason it was early has gone (a safety alarm whose
   * effects were all delivered), so the object is not woken for nothing. `arm` leaves an early
   * alarm alone instead: on a busy object that would move the alarm back and forth, a write each
   * way, where one early alarm costs one wake. An alarm due now or past is left to fire. It ends
   * a hold (`holdAlarm`) too: an alarm kept later than a timer goes to that timer.
   */
  async trim() {
    const held = this.heldUntil !== null;
    this.heldUntil = null;
    if (this.armedAt === undefined) this.armedAt = await this.storage.getAlarm();
    if (this.armedAt === null || this.armedAt <= this.now()) return;
    const next = this.earliest();
    if (next !== null && next === this.armedAt) return;
    // Only a held alarm can be later than a timer (one left undelivered: a failed attempt's retry).
    if (next !== null && next < this.armedAt && !held) return;
    // Every timer is in the table just read: the alarm now follows the earliest exactly.
    this.setSince = Infinity;
    this.armedAt = next;
    if (next === null) await this.storage.deleteAlarm();
    else await this.storage.setAlarm(next);
  }

  /**
   * Runs every due timer (from the object's alarm handler). A timer is removed only after its
   * handler finished and only if the handler did not move it, so a crash mid-handler fires it
   * again. A handler that throws is retried after TIMER_RETRY_MS.
   */
  async fire(handlers: Record<string, TimerHandler>, now = this.now()) {
    this.armedAt = null; // the runtime cleared the alarm that woke us
    this.heldUntil = null; // what it was held for is due now, and fired below
    // Every due row is deleted or moved below, after its handler: nothing known of them holds.
    this.forget();
    this.rows = null;
    const due = this.table.read(
      () =>
        this.storage.sql
          .exec<{ name: string; due_at: number; payload: string | null }>(
            "SELECT name, due_at, payload FROM _timers WHERE due_at <= ? ORDER BY due_at, name",
            now,
          )
          .toArray(),
      null,
    );
    if (due === null) return;
    for (const t of due) {
      const handler = handlers[t.name] ?? handlers[t.name.split(":")[0]];
      const set = new Map<string, number>();
      this.setWhileFiring = set;
      try {
        if (handler) await handler(t.payload == null ? null : JSON.parse(t.payload), t.name);
        // Not if it was set meanwhile: to another time (the row no longer matches), to the same
        // one (a row the handler asked for, which must not go as the one that fired), or no later
        // than a later one (the row, still at the spent time, goes to the time asked for).
        const asked = set.get(t.name);
        if (asked === undefined)
          this.storage.sql.exec("DELETE FROM _timers WHERE name = ? AND due_at = ?", t.name, t.due_at);
        else if (asked !== t.due_at) {
          this.setSince = Math.min(this.setSince, asked);
          this.storage.sql.exec("UPDATE _timers SET due_at = ? WHERE name = ? AND due_at = ?", asked, t.name, t.due_at);
        }
      } catch (err) {
        console.error(JSON.stringify({ msg: "timer handler failed", timer: t.name, error: String(err) }));
        const retryAt = this.now() + TIMER_RETRY_MS;
        this.setSince = Math.min(this.setSince, retryAt);
        this.storage.sql.exec("UPDATE _timers SET due_at = ? WHERE name = ? AND due_at = ?", retryAt, t.name, t.due_at);
      } finally {
        this.setWhileFiring = null;
        this.forget(t.name);
      }
    }
    await this.arm();
  }
}
