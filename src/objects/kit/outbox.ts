/**
 * A Durable Object's durable outbox. An effect on another binding (a D1 projection, an audit row,
 * a call to another object) is stored in the same storage turn as the state change that causes
 * it, then delivered at least once: at once after the commit (in the background), and by the
 * scheduler's alarm with capped, jittered backoff until the receiver takes it. Receivers are
 * idempotent, so a redelivery changes nothing.
 */
import type { BatchItem } from "drizzle-orm/batch";
import type { Db } from "../../db/client";
import { Pool } from "./pool";
import type { Scheduler } from "./scheduler";
import { kitTable } from "./tables";

/** An effect that becomes D1 statements; all due D1 effects of one flush share one batch. */
interface D1Effect<P> {
  target: "d1";
  /**
   * Statements for the payload, built when delivered (from the object's state at that time).
   * `row.createdAt`: when the row was first stored (a keyed row keeps it when a newer payload
   * replaces it), so an effect can tell a row an earlier instance of the object may have tried.
   */
  statements(payload: P, row: { createdAt: number }): BatchItem<"sqlite">[] | Promise<BatchItem<"sqlite">[]>;
  /**
   * Statements for several payloads of this kind enqueued one after another, when fewer than one
   * each will do (an audit row per grant: many rows to an insert). Used instead of `statements`;
   * the statements belong to the run together, so its `delivered` hooks are given no results.
   */
  many?(payloads: P[]): BatchItem<"sqlite">[];
  /**
   * After the batch committed, e.g. to remember what the index now shows. `results`: what D1
   * answered for this effect's own statements, in their order (a read rides in the batch for free).
   */
  delivered?(payload: P, results: unknown[]): void;
}

/** An effect delivered by calling something else (another Durable Object). */
interface CallEffect<P> {
  target: "call";
  /**
   * `signal` aborts at the attempt's deadline: the attempt then counts as failed and is retried,
   * so a deliver that acts on the receiver's answer (changes its own object's state with it) must
   * check the signal first, or a late answer would be acted on beside the retry's.
   */
  deliver(payload: P, signal: AbortSignal): Promise<void>;
  /** After the receiver took it, in the turn that removes it from the outbox. */
  delivered?(payload: P): void;
  /** How long the receiver has to answer an attempt (default OUTBOX_CALL_TIMEOUT_MS). */
  timeoutMs?: number;
  /**
   * The receiver, as a name (`coordinator:<fleet>`): calls to one receiver go one at a time, in
   * the order flushes hand them over (about enqueue order: see Pool), and one that hangs holds a
   * single slot, so the others' calls pass it. Without it a call is bound by the object's slots alone.
   */
  lane?(payload: P): string;
}

export type Effect<P = unknown> = D1Effect<P> | CallEffect<P>;

/**
 * Thrown by a call effect whose receiver must not be called yet (a rate limit): the effect is
 * kept, due again at `at` and not at any flush before it, without a warning (should it fail
 * later, its backoff starts a step on).
 */
export class NotYet extends Error {
  constructor(readonly at: number) {
    super("not yet");
  }
}

/** A call's receiver did not answer within its deadline. */
export class CallTimeout extends Error {
  constructor(readonly ms: number) {
    super(`no answer within ${ms} ms`);
  }
}

type Row = {
  id: number;
  kind: string;
  dedup_key: string | null;
  payload: string;
  attempts: number;
  seq: number;
  next_at: number;
  created_at: number;
};

export const OUTBOX_TIMER = "outbox";

/** The index `nextDue` finds a row tried before by (one made before it gets it there). */
const RETRY_INDEX_DDL = "CREATE INDEX IF NOT EXISTS _outbox_retry ON _outbox (next_at) WHERE attempts > 0";
/**
 * The outbox's table, for an object that has none yet. Every row an INSERT touches is billed as
 * written, so a stored effect is one row, plus its key's index entry only when it has a key:
 * - no AUTOINCREMENT, whose sqlite_sequence row was rewritten by every INSERT. Without it a
 *   deleted row's id can be given again (SQLite takes the largest id plus one), which matters to
 *   a delivery that still holds the old row (see `underWay` for why none acts on a reused id) and
 *   to the rounds' cursor (see `lowerCursor` for why none is given at or behind it).
 * - the key's uniqueness a partial index, so an effect without a key (most of them) adds no entry.
 * - the time of a row tried before (failed, not yet, parked) a partial index, which `nextDue`
 *   reads instead of every row; a row never tried adds no entry (see `freshDue` for those).
 * An object made before keeps its table as it is (AUTOINCREMENT, and a key index holding NULLs):
 * every statement here works on both, and only new objects save the rows.
 */
const OUTBOX_DDL = `CREATE TABLE IF NOT EXISTS _outbox (
  id INTEGER PRIMARY KEY,
  kind TEXT NOT NULL,
  dedup_key TEXT,
  payload TEXT NOT NULL,
  seq INTEGER NOT NULL DEFAULT 0,
  attempts INTEGER NOT NULL DEFAULT 0,
  next_at INTEGER NOT NULL,
  created_at INTEGER NOT NULL,
  last_error TEXT
);
CREATE UNIQUE INDEX IF NOT EXISTS _outbox_dedup_key ON _outbox (dedup_key) WHERE dedup_key IS NOT NULL;
${RETRY_INDEX_DDL}`;
/** If the immediate delivery never happens (the object died), the alarm delivers after this. */
export const OUTBOX_SAFETY_MS = 10_000;
export const OUTBOX_MAX_BACKOFF_MS = 5 * 60_000;
/** Effects delivered per round of a flush (one D1 batch at most this large). */
const MAX_BATCH = 200;
/** Rows removed per DELETE (two bound values each, under the runtime's bound of 100 a statement). */
const DELETE_CHUNK = 50;
/** Rows read again by id per round (one bound value each). */
const REVISIT_CHUNK = 90;
/**
 * How long a call's receiver has to answer before the attempt counts as failed and its slot
 * takes the next call: a hung receiver holds up only its own effect, and a flush ends.
 */
const OUTBOX_CALL_TIMEOUT_MS = 30_000;
/**
 * How long an effect of a kind this code does not know is left before it is looked at again: a
 * newer release wrote it and its deploy was rolled back; the release after this one delivers it.
 */
const UNKNOWN_KIND_RECHECK_MS = 60 * 60_000;
/** The alarm for effects whose call is under way: no sooner than this, so it does not spin. */
const IN_FLIGHT_ALARM_MS = 1_000;

export function backoffMs(attempts: number, random = Math.random()) {
  const capped = Math.min(OUTBOX_MAX_BACKOFF_MS, 1000 * 2 ** Math.max(0, attempts - 1));
  // Full jitter over the upper half: retries from many objects do not arrive in lockstep.
  return Math.round(capped * (0.5 + random / 2));
}

export class Outbox<K extends string> {
  private chain: Promise<void> = Promise.resolve();
  private readonly table;
  /** Effects enqueued by `delivered` hooks since the round began: the flush delivers them too. */
  private followUps = 0;
  private inHook = false;
  /**
   * The one record of what is under way, by row id: every row read for delivery gets an entry,
   * and its outcome (`done`, `failed`, NotYet) acts on the row only while that entry is still the
   * row id's. Without AUTOINCREMENT a new row may take a deleted row's id, and `done` deletes by
   * id (and seq, which a new row starts again at 0); the entry is removed when its outcome acts
   * or the row is discarded, and a later round reads the id afresh only once it is gone, so an
   * outcome arriving after that — however late — can never delete, back off or re-time a newer
   * row. A call's entry also keeps the row from every other flush until its attempt settles
   * (queued for a slot or waiting on the receiver). In memory only, and rightly so: a kill -9
   * ends every delivery with the process, the row is still stored, and the next round reads
   * every row afresh (at least once).
   */
  private readonly underWay = new Map<number, Delivery>();
  /** Each row read for delivery: its entry in `underWay`, which is its delivery while still there. */
  private readonly deliveryOf = new WeakMap<Row, Delivery>();
  /** Effects offered (`offer`) and not yet delivered, by key: in memory only. */
  private readonly offered = new Map<string, { kind: K; payload: unknown }>();
  private readonly pool: Pool;

  constructor(
    private readonly storage: DurableObjectStorage,
    private readonly scheduler: Scheduler,
    private readonly effects: Record<K, Effect>,
    private readonly db: () => Db,
    /**
     * Call effects under way at once, for all flushes together (1: one after another); with
     * lanes, one per receiver at most. In what order: see Pool.
     */
    callConcurrency = 1,
    /** The object's commit hook, if it has one: the table is known to exist once its turn committed (kitTable). */
    onCommit?: (fn: () => void) => void,
  ) {
    this.pool = new Pool(Math.max(1, callConcurrency));
    this.table = kitTable(storage, "_outbox", OUTBOX_DDL, onCommit);
  }

  /**
   * Stores an effect; synchronous, so it commits with the state change made in the same turn.
   * With a `key`, a pending effect under that key is replaced (the latest payload wins, e.g. "the
   * index must show the ledger as it is now"), and a delivery of the older payload under way does
   * not remove the newer one. A new payload is due at once, even where the old one was waiting
   * out a backoff: the write that enqueued it may answer only after its own flush delivered it
   * (an operator's write does), and a backoff left from the old payload would let it answer
   * with its effect undelivered. Its count of failed attempts is kept, so should it fail again
   * the alarm's retries go on backing off from there rather than from the start.
   */
  enqueue(kind: K, payload: unknown = {}, opts: { key?: string; deferMs?: number } = {}) {
    const now = Date.now();
    // `deferMs`: no delivery of its own; it rides with the next flush, or the alarm after deferMs,
    // so effects of a busy path (a grant's audit row) reach D1 many to a batch.
    const due = now + (opts.deferMs ?? OUTBOX_SAFETY_MS);
    const attempts = opts.deferMs === undefined ? 0 : -1;
    const text = JSON.stringify(payload);
    if (this.inHook && opts.deferMs === undefined) this.followUps++;
    if (opts.key) {
      this.table.write(() =>
        this.storage.sql.exec(
          `INSERT INTO _outbox (kind, dedup_key, payload, next_at, created_at, attempts) VALUES (?, ?, ?, ?, ?, ?)
         ON CONFLICT(dedup_key) WHERE dedup_key IS NOT NULL DO UPDATE SET kind = excluded.kind, payload = excluded.payload, seq = seq + 1,
           next_at = CASE WHEN attempts > 0 AND excluded.attempts = 0 THEN excluded.created_at ELSE MIN(next_at, excluded.next_at) END,
           attempts = CASE WHEN attempts > 0 THEN attempts ELSE MIN(attempts, excluded.attempts) END`,
          kind,
          opts.key,
          text,
          due,
          now,
          attempts,
        ),
      );
      // A row a round read already is at or behind the cursor: its newer payload is read again by id.
      const read = this.keyedRead.get(opts.key);
      if (read !== undefined) this.revisit.set(read.id, Math.min(this.revisit.get(read.id) ?? Infinity, due));
    } else {
      this.table.write(() =>
        this.storage.sql.exec(
          "INSERT INTO _outbox (kind, payload, next_at, created_at, attempts) VALUES (?, ?, ?, ?, ?)",
          kind,
          text,
          due,
          now,
          attempts,
        ),
      );
    }
    this.freshDue = Math.min(this.freshDue, due);
    this.scheduler.schedule(OUTBOX_TIMER, due, null, { noLaterThan: true });
  }

  /**
   * A D1 effect whose loss costs nothing, because the next call brings it again (a heartbeat's
   * index refresh, whose mark moves only once D1 took it): kept in memory, not stored, and
   * delivered by the next flush — unless an effect under the same key is stored and pending, which
   * delivers the state as it is then. A failed delivery is dropped; the next call offers it again.
   * It costs no storage row and no alarm (a stored effect costs two or three rows, stored and
   * deleted, and is kill -9 proof, which such an effect does not need).
   */
  offer(kind: K, key: string, payload: unknown = {}) {
    this.offered.set(key, { kind, payload });
  }

  /**
   * Drops the pending effects of one kind, worthless now (a wiped fleet's console notices). Their
   * deliveries under way are forgotten: their outcome acts on nothing, and a new row that takes
   * one's id is not held behind it.
   */
  discard(kind: K) {
    if (!this.table.exists()) return;
    this.storage.sql.exec("DELETE FROM _outbox WHERE kind = ?", kind);
    for (const [id, d] of this.underWay) if (d.kind === kind) this.underWay.delete(id);
    for (const [key, read] of this.keyedRead) if (read.kind === kind) this.keyedRead.delete(key);
    // Rare: the next round reads every row again, which also covers a caller's transaction that
    // rolls this DELETE back (the rows return, no longer under way in memory).
    this.cursor = 0;
  }

  /**
   * Removes the outbox timer when nothing is pending, rather than leaving it for the next burst
   * (see `rearm`): for a caller about to take back an early alarm (Scheduler.trim), which that
   * timer would otherwise keep.
   */
  forgetIdleTimer() {
    if (this.table.exists() && this.nextDue() === null) this.scheduler.cancel(OUTBOX_TIMER);
  }

  /**
   * Settles once every call under way now has settled, and those its settling led to (a flush
   * ends with its own calls, not with an earlier flush's still under way): for a test that must
   * see every effect out before it looks at the receivers.
   */
  async idle(): Promise<void> {
    for (;;) {
      const calls = [...this.underWay.values()].flatMap((d) => (d.call ? [d.call.settled] : []));
      if (calls.length === 0) return;
      await Promise.all(calls);
      await this.flush();
    }
  }

  /** How many effects wait for delivery (tests, metrics). */
  pending(): number {
    if (!this.table.exists()) return 0;
    return this.storage.sql.exec<{ n: number }>("SELECT COUNT(*) AS n FROM _outbox").one().n;
  }

  /**
   * Delivers every effect that is due: never tried yet, or past its backoff. Flushes read the
   * outbox and deliver its D1 effects one after another; one that finds nothing to do costs one
   * read. A flush asked for while another waits its turn joins that one, which has not read the
   * outbox yet and so delivers what the caller enqueued: a busy object (a rollout's outcomes
   * arriving while its writes are delivered) runs one more flush, not one per call, each reading
   * the whole outbox. Calls are handed to the object's pool and do not hold up the next flush: it
   * delivers its own effects while an earlier flush's receiver is still answering. A flush ends
   * once its own calls settled (answered, refused, or past their deadline).
   */
  flush(): Promise<void> {
    if (this.waiting) return this.waiting;
    const round = this.chain.then(() => {
      this.waiting = null;
      return this.deliver();
    });
    const run = round.then((r) => r.settled);
    this.waiting = run;
    this.chain = round.then(
      () => {},
      () => {},
    );
    return run;
  }
  /** The flush queued behind the one under way, not started yet. */
  private waiting: Promise<void> | null = null;

  /**
   * One round: reads what is due, delivers the D1 effects and hands the calls to the pool. What it
   * returns is the rest of the flush: the calls settling, then the round after it if one is owed.
   */
  private async deliver(): Promise<{ settled: Promise<void> }> {
    await this.deliverOffered();
    if (!this.table.exists()) return { settled: Promise.resolve() };
    // Hooks that enqueue bump this; any bump until the calls settle owes a round after this one.
    const followUps = this.followUps;
    const now = Date.now();
    const { rows, cutShort } = this.readRound(now);
    // With calls under way a round that starts nothing still re-arms below: the alarm that fired
    // for one must stay set for it.
    if (rows.length === 0 && this.underWay.size === 0) return { settled: Promise.resolve() };
    const d1Rows: Row[] = [];
    const calls: Row[] = [];
    /** Rows replaced by a newer payload while the older one is delivered: after that attempt. */
    const held: Promise<void>[] = [];
    const unknown = new Set<string>();
    for (const r of rows) {
      const prior = this.underWay.get(r.id);
      if (prior) {
        if (prior.call) held.push(prior.call.settled);
        // Read, but neither under way nor enqueued since: once the older attempt settles, the
        // round owed for it reads it again by id (and `nextDue` keeps a timer for it meanwhile).
        this.revisit.set(r.id, Math.min(this.revisit.get(r.id) ?? Infinity, r.next_at));
        continue;
      }
      const effect = this.effects[r.kind as K];
      if (!effect) {
        unknown.add(r.kind);
        continue;
      }
      (effect.target === "d1" ? d1Rows : calls).push(r);
    }
    for (const kind of unknown) this.park(kind, now);
    for (const r of [...d1Rows, ...calls]) this.track(r);
    if (d1Rows.length) await this.deliverD1(d1Rows);
    const attempts = calls.map((r) => this.dispatch(r));
    const settled = (async () => {
      await Promise.all(attempts);
      // A full round: more may be waiting behind it. A delivery that led to a next step (a
      // `delivered` hook enqueued it) has that step delivered now rather than by the alarm. A
      // newer payload held behind its older one's attempt goes once that attempt settled.
      const again = cutShort || this.followUps !== followUps || held.length > 0;
      // The flush that follows sets the timer; this one's would be a row written for nothing.
      // Should the object die between the two, the timer is where every enqueue left it, no
      // later than any pending effect was due, so the alarm still delivers them.
      if (!again) this.rearm();
      await this.scheduler.arm();
      if (held.length) await Promise.all(held);
      if (again) await this.flush();
    })();
    return { settled };
  }

  /**
   * What a round can start, by id, at most MAX_BATCH: the rows never tried past the cursor, the
   * rows read again by id (`revisit`), and the rows tried before that are due (their partial
   * index). None of the three reads the rows of calls still under way, however many: those are
   * at or behind the cursor, and left out of `revisit` (a retry under way is read again, through
   * its index entry, only while its time is past). A new instance's cursor is 0: its first round
   * reads every row never tried, as a kill -9 demands.
   */
  private readRound(now: number): { rows: Row[]; cutShort: boolean } {
    const columns = "id, kind, dedup_key, payload, attempts, seq, next_at, created_at";
    // Deferred effects (attempts -1) ride along with any flush.
    const fresh = this.storage.sql
      .exec<Row>(
        `SELECT ${columns} FROM _outbox WHERE id > ? AND attempts <= 0 ORDER BY id LIMIT ?`,
        this.cursor,
        MAX_BATCH,
      )
      .toArray();
    const retryLimit = MAX_BATCH + this.underWay.size;
    const retries = !this.retryMayExist
      ? []
      : this.retryRows<Row>(
          `SELECT ${columns} FROM _outbox INDEXED BY _outbox_retry WHERE attempts > 0 AND next_at <= ? ORDER BY next_at LIMIT ?`,
          now,
          retryLimit,
        );
    // Bound values, not a JSON list, whose own rows would be counted as read.
    const ids = [...this.revisit.keys()].sort((a, b) => a - b).slice(0, REVISIT_CHUNK);
    const again = ids.length
      ? this.storage.sql
          .exec<Row>(
            `SELECT ${columns} FROM _outbox WHERE id IN (${ids.map(() => "?").join(", ")}) AND (attempts <= 0 OR next_at <= ?)`,
            ...ids,
            now,
          )
          .toArray()
      : [];
    // What is not found is gone, or tried since (its index entry finds it); what is found is
    // taken below or stays for the next round, as do the ids not read this round.
    for (const id of ids) this.revisit.delete(id);
    const byId = new Map<number, Row>();
    for (const r of [...fresh, ...again, ...retries]) byId.set(r.id, r);
    const sorted = [...byId.values()].sort((a, b) => a.id - b.id);
    const taken = sorted.filter((r) => this.underWay.get(r.id)?.seq !== r.seq).slice(0, MAX_BATCH);
    const last = taken.length ? taken[taken.length - 1].id : -Infinity;
    // By id, so what was read and not taken is past the last row taken.
    let cutShort = fresh.length === MAX_BATCH || retries.length === retryLimit || this.revisit.size > 0;
    for (const r of again)
      if (r.id > last) {
        this.revisit.set(r.id, r.next_at);
        cutShort = true;
      }
    if (sorted.some((r) => r.id > last && this.underWay.get(r.id)?.seq !== r.seq)) cutShort = true;
    // The cursor passes every row never tried that was read and taken; fresh rows are in id order,
    // so those not taken are all past it.
    for (const r of fresh) if (r.id <= last) this.cursor = Math.max(this.cursor, r.id);
    // Every row never tried past the cursor was read, unless the read was cut short or not all
    // were taken; each one from here on is enqueued after it, and `freshDue` holds the earliest.
    this.freshDue = Infinity;
    this.freshKnown = fresh.length < MAX_BATCH && fresh.every((r) => r.id <= last);
    for (const r of taken) if (r.dedup_key !== null) this.keyedRead.set(r.dedup_key, { id: r.id, kind: r.kind });
    return { rows: taken, cutShort };
  }

  /**
   * Rows of a kind this code does not know, written by code that did (a newer release, then a
   * rollback): kept for a release that knows them, but out of every flush's way until the next
   * look, long after — left due, they would fill each round's read, and a full round calls the
   * next one, without end, while the known rows behind them waited. All of the kind at once, in
   * one statement; logged once per kind in the object's life.
   */
  private park(kind: string, now: number) {
    this.retryMayExist = true;
    this.storage.sql.exec(
      "UPDATE _outbox SET attempts = MAX(attempts, 1), next_at = ?, last_error = ? WHERE kind = ? AND (attempts <= 0 OR next_at <= ?)",
      now + UNKNOWN_KIND_RECHECK_MS,
      "unknown kind",
      kind,
      now,
    );
    if (this.parkedKinds.has(kind)) return;
    this.parkedKinds.add(kind);
    console.error(
      JSON.stringify({
        msg: "outbox effects of unknown kind kept for a later release",
        kind,
        recheckMs: UNKNOWN_KIND_RECHECK_MS,
      }),
    );
  }
  private readonly parkedKinds = new Set<string>();

  /**
   * Hands a call to the pool, marked under way until its attempt settles. Registered at once, so
   * a flush that reads the row while it waits for a slot leaves it to this attempt.
   */
  private dispatch(r: Row): Promise<void> {
    const delivery = this.deliveryOf.get(r)!;
    let settle!: () => void;
    const attempt: Attempt = { settled: new Promise<void>((res) => (settle = res)), until: null };
    delivery.call = attempt;
    // A payload its lane cannot be read from is a failed attempt like any other (backed off, the
    // row no longer under way); thrown here, it would stay under way and due, and the alarm spin.
    let lane: string | undefined;
    let unreadable: { err: unknown } | null = null;
    try {
      lane = (this.effects[r.kind as K] as CallEffect<unknown>).lane?.(JSON.parse(r.payload));
    } catch (err) {
      unreadable = { err };
    }
    return this.pool
      .run(async () => (unreadable ? this.failed([r], unreadable.err) : this.deliverCall(r, attempt)), lane)
      .finally(() => {
        // Settled without acting on the row (a late NotYet for a discarded row): no longer under way.
        if (this.underWay.get(r.id) === delivery) this.underWay.delete(r.id);
        settle();
      });
  }

  private timeoutOf(r: Row) {
    return (this.effects[r.kind as K] as CallEffect<unknown>).timeoutMs ?? OUTBOX_CALL_TIMEOUT_MS;
  }

  /**
   * One attempt, settled by the receiver's answer or its deadline, whichever comes first. Past the
   * deadline the attempt is a failed one (backoff as for any failure) and its late answer is only
   * logged: the row may be retried meanwhile, so neither `done` nor the `delivered` hook may run
   * for it, and the signal tells the effect not to act on it either.
   */
  private async deliverCall(r: Row, attempt: Attempt) {
    const effect = this.effects[r.kind as K] as CallEffect<unknown>;
    const ms = this.timeoutOf(r);
    const abort = new AbortController();
    let timer: ReturnType<typeof setTimeout> | null = null;
    const deadline = new Promise<never>((_, reject) => {
      timer = setTimeout(() => {
        abort.abort(new CallTimeout(ms));
        reject(new CallTimeout(ms));
      }, ms);
    });
    attempt.until = Date.now() + ms;
    try {
      const payload = JSON.parse(r.payload);
      const call = Promise.resolve().then(() => effect.deliver(payload, abort.signal));
      call.then(
        () => abort.signal.aborted && lateAnswer(r, "answered"),
        (err) => abort.signal.aborted && lateAnswer(r, String(err)),
      );
      await Promise.race([call, deadline]);
      this.hook(() => effect.delivered?.(payload));
      this.done(r);
    } catch (err) {
      // Due again at `at`, not at every flush before it: counted as an attempt, so that next_at
      // holds. Only while this delivery is still its row id's: a row that took the id of one
      // discarded meanwhile starts at seq 0 too, and is not this receiver's to hold back.
      if (err instanceof NotYet) {
        if (this.settles(r)) {
          this.retryMayExist = true;
          this.storage.sql.exec(
            "UPDATE _outbox SET next_at = ?, attempts = MAX(attempts, 1) WHERE id = ? AND seq = ?",
            err.at,
            r.id,
            r.seq,
          );
        }
      } else this.failed([r], err);
    } finally {
      clearTimeout(timer);
    }
  }

  private async deliverOffered() {
    if (this.offered.size === 0) return;
    const offered = [...this.offered];
    this.offered.clear();
    const stored = (key: string) =>
      this.table.exists() &&
      this.storage.sql.exec("SELECT 1 FROM _outbox WHERE dedup_key = ?", key).toArray().length > 0;
    for (const [key, { kind, payload }] of offered) {
      if (stored(key)) continue;
      const effect = this.effects[kind] as D1Effect<unknown>;
      try {
        const statements = await effect.statements(payload, { createdAt: Date.now() });
        const results = statements.length
          ? await this.db().batch(statements as [BatchItem<"sqlite">, ...BatchItem<"sqlite">[]])
          : [];
        this.hook(() => effect.delivered?.(payload, results as unknown[]));
      } catch (err) {
        console.warn(
          JSON.stringify({
            msg: "offered effect not delivered; the next call offers it again",
            kind,
            error: String(err),
          }),
        );
      }
    }
  }

  private hook(fn: () => void) {
    this.inHook = true;
    try {
      fn();
    } finally {
      this.inHook = false;
    }
  }

  private async deliverD1(rows: Row[]) {
    try {
      // Consecutive rows of a kind that builds many at once go as one run, in enqueue order.
      const groups: {
        rows: Row[];
        statements: BatchItem<"sqlite">[] | Promise<BatchItem<"sqlite">[]>;
        run: boolean;
      }[] = [];
      for (let i = 0; i < rows.length;) {
        const effect = this.effects[rows[i].kind as K] as D1Effect<unknown>;
        let end = i + 1;
        if (effect.many) while (end < rows.length && rows[end].kind === rows[i].kind) end++;
        const run = rows.slice(i, end);
        if (effect.many)
          groups.push({ rows: run, statements: effect.many(run.map((r) => JSON.parse(r.payload))), run: true });
        else
          for (const r of run)
            groups.push({
              rows: [r],
              statements: effect.statements(JSON.parse(r.payload), { createdAt: r.created_at }),
              run: false,
            });
        i = end;
      }
      const parts = await Promise.all(groups.map((g) => g.statements));
      const all = parts.flat();
      const results: unknown[] = all.length
        ? await this.db().batch(all as [BatchItem<"sqlite">, ...BatchItem<"sqlite">[]])
        : [];
      let at = 0;
      groups.forEach((g, i) => {
        const own = g.run ? [] : results.slice(at, at + parts[i].length);
        at += parts[i].length;
        for (const r of g.rows)
          this.hook(() => (this.effects[r.kind as K] as D1Effect<unknown>).delivered?.(JSON.parse(r.payload), own));
      });
      // One statement for the round's rows: the hooks and the removal are one turn either way.
      this.doneAll(rows);
    } catch (err) {
      this.failed(rows, err);
    }
  }

  /** Removes a delivered row, unless a newer payload replaced it meanwhile (then that one is still due). */
  private done(r: Row) {
    this.doneAll([r]);
  }

  /**
   * Removes delivered rows, each unless a newer payload replaced it meanwhile, in one statement
   * (a DELETE each cost a statement each for the same rows written; a pair of bound values each
   * reads only its own row, where a JSON list would count its own rows read too).
   */
  private doneAll(delivered: Row[]) {
    const rows = delivered.filter((r) => this.settles(r));
    for (let at = 0; at < rows.length; at += DELETE_CHUNK) {
      const chunk = rows.slice(at, at + DELETE_CHUNK);
      this.storage.sql.exec(
        `DELETE FROM _outbox WHERE ${chunk.map(() => "(id = ? AND seq = ?)").join(" OR ")}`,
        ...chunk.flatMap((r) => [r.id, r.seq]),
      );
    }
    // A row with a newer payload stays (it is in `revisit`), and so does its key's entry.
    for (const r of rows)
      if (r.dedup_key !== null && !this.revisit.has(r.id) && this.keyedRead.get(r.dedup_key)?.id === r.id)
        this.keyedRead.delete(r.dedup_key);
    if (rows.some((r) => r.id >= this.cursor)) this.lowerCursor();
  }

  /**
   * Keeps the cursor at a row still stored (or 0), after the row it stood at may have gone: SQLite
   * gives a new row the largest id stored plus one, so while a row at the cursor is stored every
   * new id is past it, and a cursor left at a deleted row would let a new row take an id at or
   * behind it, which no round would read. It goes back to the last row still under way behind it
   * (stored until its outcome), never forward: the rounds then read again only the rows between
   * that are stored and not under way (tried before, or read again by id anyway).
   */
  private lowerCursor() {
    let at = 0;
    for (const id of this.underWay.keys()) if (id < this.cursor && id > at) at = id;
    this.cursor = at;
  }

  /** `r` is read for delivery: from now its outcome, and no earlier one, acts on its row id. */
  private track(r: Row) {
    const delivery: Delivery = { kind: r.kind, seq: r.seq, due: r.next_at, call: null };
    this.deliveryOf.set(r, delivery);
    this.underWay.set(r.id, delivery);
  }

  /** Whether `r`'s delivery is still the one its row id stands for; its outcome ends it. */
  private settles(r: Row): boolean {
    const d = this.underWay.get(r.id);
    if (d === undefined || d !== this.deliveryOf.get(r)) return false;
    this.underWay.delete(r.id);
    return true;
  }

  /**
   * Backs off the payloads that failed. A row replaced by a newer payload while the older one was
   * under way is left as `enqueue` made it (due at once): the failure was the older payload's, and
   * the write that enqueued the newer one may be waiting for its own flush to deliver it.
   */
  private failed(rows: Row[], err: unknown) {
    const now = Date.now();
    for (const r of rows) {
      if (!this.settles(r)) continue;
      this.retryMayExist = true;
      const attempts = Math.max(0, r.attempts) + 1;
      this.storage.sql.exec(
        "UPDATE _outbox SET attempts = ?, next_at = ?, last_error = ? WHERE id = ? AND seq = ?",
        attempts,
        now + backoffMs(attempts),
        String(err).slice(0, 500),
        r.id,
        r.seq,
      );
    }
    console.warn(
      JSON.stringify({ msg: "outbox delivery failed; retrying", kinds: rows.map((r) => r.kind), error: String(err) }),
    );
  }

  /**
   * The outbox timer follows the earliest pending effect. None pending, the timer is left where
   * it is rather than deleted: the next effect enqueued before it fires finds it no later than
   * its own safety time and writes nothing (a burst of changes costs no timer row each), and if
   * none comes it fires once, finds nothing, and is gone — the alarm set for it fires anyway.
   */
  private rearm() {
    const next = this.nextDue(true);
    if (next !== null) this.scheduler.schedule(OUTBOX_TIMER, next);
  }

  /**
   * When the earliest pending effect is due. A row whose call is under way is left out while its
   * time is past (a flush would not take it: the alarm would fire again and again), but the timer
   * is kept for it at its attempt's deadline, so that after a kill -9 the alarm delivers it.
   *
   * Read without a scan of the outbox (storage rows read are billed, and a rollout's outbox holds
   * hundreds while its calls are under way): a row tried before is found through its partial
   * index, one never tried in memory — the last round read every such row (`freshKnown`), so
   * each is under way (its time kept in `underWay`) or enqueued since (`freshDue`). Until a
   * round has read them all (a new instance, or a round cut short at MAX_BATCH), and after one
   * that read a newer payload left behind its older one's attempt, the rows never tried are looked
   * for in the table.
   */
  private nextDue(fromRound = false): number | null {
    const now = Date.now();
    const calls = [...this.underWay].flatMap(([id, d]) => (d.call ? [{ id, ...d.call }] : []));
    let at = this.freshKnown ? this.freshDue : Math.min(this.freshDue, this.freshInTable());
    for (const d of this.underWay.values()) if (!d.call || d.due > now) at = Math.min(at, d.due);
    // A newer payload behind its older one's call is covered by that call's alarm below.
    for (const [id, due] of this.revisit) if (!this.underWay.get(id)?.call) at = Math.min(at, due);
    const retry = this.retryDue(now, new Set(calls.map((c) => c.id)), fromRound);
    if (retry !== null) at = Math.min(at, retry);
    if (calls.length) {
      // Only calls that have a slot: one waiting for a slot ends no sooner than a running one frees
      // it, and counting its own deadline (passed while it waited) would fire the alarm every second.
      const running = calls.flatMap((a) => (a.until === null ? [] : [a.until]));
      // A moment past the deadline: by then the call's own timeout has failed it and re-armed the
      // timer, so this alarm fires only if the object died meanwhile (not once per timeout too).
      const until = (running.length ? Math.min(...running) : now + OUTBOX_CALL_TIMEOUT_MS) + IN_FLIGHT_ALARM_MS;
      at = Math.min(at, Math.max(until, now + IN_FLIGHT_ALARM_MS));
    }
    return at === Infinity ? null : at;
  }

  /** The earliest row never tried past the cursor (see `nextDue`): rows no round has read. */
  private freshInTable(): number {
    const at = this.storage.sql
      .exec<{ at: number | null }>("SELECT MIN(next_at) AS at FROM _outbox WHERE id > ? AND attempts <= 0", this.cursor)
      .one().at;
    return at ?? Infinity;
  }

  /**
   * The earliest row tried before whose call is not under way (one under way counts while its
   * time is ahead), in the order of its index: reads as many rows as calls are under way at most.
   */
  private retryDue(now: number, underWay: Set<number>, fromRound: boolean): number | null {
    if (!this.retryMayExist) return null;
    const rows = this.retryRows<{ id: number; next_at: number }>(
      "SELECT id, next_at FROM _outbox INDEXED BY _outbox_retry WHERE attempts > 0 ORDER BY next_at",
    );
    // Learnt only at a round's end, never in a caller's transaction, which could roll back the
    // removal of the rows this read did not see.
    if (rows.length === 0 && fromRound) this.retryMayExist = false;
    for (const r of rows) if (r.next_at > now || !underWay.has(r.id)) return r.next_at;
    return null;
  }

  /** A read through the retry index (`query` names it: INDEXED BY). */
  private retryRows<T extends Record<string, SqlStorageValue>>(query: string, ...bindings: SqlStorageValue[]): T[] {
    // INDEXED BY: a table made before the index fails here as it is prepared, reading nothing,
    // and gets it (its entries are only the rows tried before, few).
    try {
      return this.storage.sql.exec<T>(query, ...bindings).toArray();
    } catch (err) {
      if (!String(err).includes("no such index")) throw err;
      this.storage.sql.exec(RETRY_INDEX_DDL);
      return this.storage.sql.exec<T>(query, ...bindings).toArray();
    }
  }
  /**
   * Whether a row tried before (failed, not yet, parked) may be stored: until a round's end found
   * none, and again from the next such outcome. The rounds and `nextDue` skip their read of the
   * retry index while it is false (the index read costs a statement and a row read when empty).
   */
  private retryMayExist = true;
  /** Whether the last round read every row never tried past the cursor (see `nextDue`). */
  private freshKnown = false;
  /**
   * The rounds' cursor: every row never tried at or behind it was read by a round of this
   * instance (and is under way, delivered, tried since, or in `revisit`), so a round reads only
   * the rows past it, not again the rows of calls still under way. No new row takes an id at or
   * behind it (`lowerCursor`). In memory: a new instance starts at 0 and reads every row.
   */
  private cursor = 0;
  /**
   * Rows at or behind the cursor due for a first attempt again, by id, with their time: a keyed
   * row's newer payload (stored over a row a round read) and one held behind its older call.
   */
  private readonly revisit = new Map<number, number>();
  /** Keyed rows a round read and not yet removed, by key: a new payload under one goes in `revisit`. */
  private readonly keyedRead = new Map<string, { id: number; kind: string }>();
  /** The earliest time of the rows enqueued since the last round's read. */
  private freshDue = Infinity;
}

/** A row's delivery under way. */
type Delivery = {
  kind: string;
  /** The payload's version being delivered: a newer one waits for this delivery to settle. */
  seq: number;
  /** The row's time when read: a row never tried is found by `nextDue` here, not in storage. */
  due: number;
  /** A call effect's attempt, once handed to the pool (none for a D1 effect's). */
  call: Attempt | null;
};

/** A call effect's attempt under way. */
type Attempt = {
  settled: Promise<void>;
  /** Its deadline, once it has a slot (null while it waits for one). */
  until: number | null;
};

function lateAnswer(r: Row, outcome: string) {
  console.warn(
    JSON.stringify({ msg: "outbox call answered after its deadline; answer ignored", kind: r.kind, id: r.id, outcome }),
  );
}
