/**
 * The ledger's storage: its keys, a write-through cache of the hot state (record, desired, report),
 * the state the view shows besides (plan, lifecycle, refresh), and the format it is all in. Every
 * write goes through here and then tells `onChange` (what is parked on the ledger wakes on it).
 * Storage calls are synchronous, so a caller's read-check-write runs without interleaving.
 */
import type { PlanState } from "../planner/ledger-side";
import { INITIAL_PLAN_STATE } from "../planner/ledger-side";
import type { RolloutMark } from "../rollouts/ledger-side";
import type { LifecycleState } from "./lifecycle";
import type { Signatures } from "./projection";
import type { ServerRecord, DesiredState } from "../model/server/record";
import { contentKey } from "../domain/report-content";
import type { StoredReport } from "../model/server/schemas";
import type { HealthSent } from "../fleetlock/ledger-side";
import type { ComputedStatus } from "../model/server/status";
import { FORMAT_KEY, LEDGER_FORMAT, upgradeLedgerStorage, type FormatUpgrade } from "./storage-format";

const KEY = {
  record: "record",
  desired: "desired",
  report: "report",
  projected: "projected",
  /** Revision of the FleetLock identity (fleetlock_id, reboot_group); registration is 0. */
  rebootRev: "reboot_rev",
  /** Written by an old release's hook when the coordinator missed a release; moved to the outbox on open. */
  legacyPendingRelease: "fleetlock_release_pending",
  /** Planned or pinned, and the newest fleet intent revision offered (src/planner/ledger-side.ts). */
  plan: "plan",
  /** The decommission under way, and its cleanup progress (./lifecycle.ts). */
  lifecycle: "lifecycle",
  /** The operator's request that the host report again now (./refresh.ts). */
  refresh: "refresh",
  /** Per agent, the generation a rollout wrote and has not yet heard settled. */
  rolloutMarks: "rollout_marks",
  /** What the coordinator was last told of the server's realization (src/fleetlock/ledger-side.ts). */
  healthSent: "health_sent",
} as const;

/** A refresh is pending from `requested_at` until the first report after it (`answered_at`). */
export interface RefreshState {
  requested_at: number;
  requested_by: string;
  answered_at: number | null;
}

/** What the index shows of this server, as last written by the projection. */
export interface ProjectedMark {
  written?: Signatures | null;
  last_seen_written: number | null;
  /** The stale_at written was leased (the host was on the channel): see ./projection.ts. */
  leased?: boolean;
  /** Marks of an older release: a dirty one cannot say what D1 holds. */
  dirty?: boolean;
}

export interface LedgerState {
  record: ServerRecord;
  desired: DesiredState;
  report: StoredReport | undefined;
  /** Identity of the report's content, heartbeat fields excluded. */
  reportKey: string | undefined;
  /** The in-memory report is newer than the stored one only by its heartbeat. */
  heartbeatOnly?: boolean;
  /** received_at of the report as stored. */
  persistedAt?: number;
}

/**
 * A short name for a report's content (its contentKey), handed to the host with each accepted
 * report: a poll that carries it back says "my report is still that one" (./report.ts,
 * pollHeartbeat). Two 32-bit FNV-1a lanes: a name, not a secret, so a fast hash that runs
 * synchronously in the ledger's turn is enough.
 */
function reportTag(key: string) {
  let a = 0x811c9dc5;
  let b = 0x01000193 ^ key.length;
  for (let i = 0; i < key.length; i++) {
    const c = key.charCodeAt(i);
    a = Math.imul(a ^ c, 0x01000193);
    b = Math.imul(b ^ c, 0x5bd1e995);
  }
  return `r${(a >>> 0).toString(36)}${(b >>> 0).toString(36)}`;
}

export class LedgerStore {
  /** Undefined until first read; null while no server is registered here. */
  private cache?: LedgerState | null;
  private refreshMemo?: RefreshState | null;
  private healthSentMemo?: HealthSent | null;
  /**
   * The rollout marks as storage holds them, the current turn's writes included: every changed
   * report settles them, and they are nearly always empty. Undefined until first read.
   */
  private rolloutMarksMemo?: Readonly<Record<string, RolloutMark>>;
  /**
   * The projection's mark as storage holds it: read by every heartbeat (is last_seen due?), written
   * only when D1 took a projection. Undefined: not read since the last write (or the ledger woke).
   */
  private projectedMemo?: ProjectedMark | null;
  /** The stored report's tag and, for its desired config, the status a fresh heartbeat of it has. */
  private answerMemo?: { key: string; tag: string; desired?: DesiredState; computed?: ComputedStatus };
  /** open() checked (and upgraded) the format: load() need not read it again. */
  private formatKnown = false;

  constructor(
    private readonly storage: DurableObjectStorage,
    /** Called after every write, in the writer's turn. */
    private readonly onChange: () => void = () => {},
  ) {}

  private get kv() {
    return this.storage.kv;
  }

  /**
   * Runs `fn` in one storage turn. Inside another it is a savepoint: if it throws, its writes roll
   * back and the outer turn may catch that and commit the rest; the hooks it registered and the
   * memory it moved roll back with it, to where they stood when it began (a heartbeat heard
   * meanwhile is kept: it was never to be stored by this turn).
   */
  transaction<T>(fn: () => T): T {
    const outer = this.commitHooks;
    const hooks = outer ?? [];
    const mark = hooks.length;
    const memory = this.remember();
    this.commitHooks = hooks;
    let out: T;
    try {
      out = this.storage.transactionSync(fn);
    } catch (err) {
      hooks.length = mark;
      this.restore(memory);
      throw err;
    } finally {
      if (!outer) this.commitHooks = null;
    }
    if (!outer) for (const hook of hooks) hook();
    return out;
  }

  /**
   * Runs `fn` once the outermost transaction committed (at once outside one), unless the
   * transaction or savepoint it was registered in rolled back: memory that mirrors a write made in
   * it must not move if the write does not stand.
   */
  onCommit(fn: () => void) {
    if (this.commitHooks) this.commitHooks.push(fn);
    else fn();
  }
  private commitHooks: (() => void)[] | null = null;

  /** The memory a transaction may move, as it is before the transaction (the cache copied: `heartbeat` mutates it). */
  private remember() {
    return {
      cache: this.cache && { ...this.cache },
      refresh: this.refreshMemo,
      rolloutMarks: this.rolloutMarksMemo,
      heard: this.heard,
    };
  }

  private restore(m: ReturnType<LedgerStore["remember"]>) {
    this.cache = m.cache;
    this.refreshMemo = m.refresh;
    this.rolloutMarksMemo = m.rolloutMarks;
    const heard = this.heard;
    // A heartbeat is memory only, never part of the turn: one heard during it still holds, if the
    // content it was heard for is the one memory is back to.
    if (heard && heard !== m.heard && this.cache?.report && heard.key === this.cache.reportKey) {
      if (heard.report.received_at > this.cache.report.received_at) {
        this.cache.report = heard.report;
        this.cache.heartbeatOnly = true;
      }
    }
  }
  /** The latest heartbeat kept in memory, with the content key it was heard for. */
  private heard?: { report: StoredReport; key: string | undefined };

  /** Brings storage written by older code to LEDGER_FORMAT; throws (touching nothing) on a newer one. */
  open(): FormatUpgrade | null {
    const upgraded = upgradeLedgerStorage(this.storage);
    // It threw on a format this code cannot read; otherwise the storage is in LEDGER_FORMAT now,
    // or empty until create() stamps it. Storage rows read are billed: not read twice per wake.
    this.formatKnown = true;
    return upgraded;
  }

  load(): LedgerState | null {
    if (this.cache === undefined) {
      const record = this.kv.get<ServerRecord>(KEY.record);
      const desired = this.kv.get<DesiredState>(KEY.desired);
      const report = this.kv.get<StoredReport>(KEY.report);
      if (record && !this.formatKnown && this.kv.get<number>(FORMAT_KEY) !== LEDGER_FORMAT) {
        // open() stamps every ledger it upgrades and create() stamps new ones: this code never
        // reads a format it was not written for.
        throw new Error(`ledger storage is not in format ${LEDGER_FORMAT}; refusing to read it`);
      }
      this.cache =
        record && desired
          ? { record, desired, report, reportKey: report && contentKey(report), persistedAt: report?.received_at }
          : null;
    }
    return this.cache;
  }

  /** The first write of a ledger, stamped with the format it is written in. */
  create(record: ServerRecord, desired: DesiredState) {
    this.kv.put(FORMAT_KEY, LEDGER_FORMAT);
    this.save({ record, desired });
  }

  save(patch: Partial<Pick<LedgerState, "record" | "desired" | "report">>) {
    if (patch.record) this.kv.put(KEY.record, patch.record);
    if (patch.desired) this.kv.put(KEY.desired, patch.desired);
    if (patch.report) this.kv.put(KEY.report, patch.report);
    this.cache = { ...(this.cache ?? ({} as LedgerState)), ...patch };
    if (patch.report) {
      this.cache.reportKey = contentKey(patch.report);
      this.cache.persistedAt = patch.report.received_at;
      this.cache.heartbeatOnly = false;
    }
    this.onChange();
  }

  /** A report whose content is the stored one's: kept in memory only, until `persistHeartbeat`. */
  heartbeat(report: StoredReport) {
    const state = this.load()!;
    state.report = report;
    state.heartbeatOnly = true;
    this.heard = { report, key: state.reportKey };
    this.onChange();
  }

  /**
   * The newest of the heartbeats sockets kept while the ledger slept (the host channel's, a poll's
   * waiter's), back in memory when newer than the one there. `reconciled_at`: the report's own, when
   * the socket heard a report; a poll's heartbeat keeps the stored one.
   */
  restoreHeartbeat(kept: ({ at: number; reconciled_at?: string } | null | undefined)[]) {
    const report = this.load()?.report;
    if (!report) return;
    let newest: { at: number; reconciled_at?: string } | null = null;
    for (const heard of kept) if (heard && heard.at > (newest?.at ?? report.received_at)) newest = heard;
    if (newest)
      this.heartbeat({
        ...report,
        received_at: newest.at,
        reconciled_at: newest.reconciled_at ?? report.reconciled_at,
      });
  }

  /** reportTag(key), computed once per report content (every heartbeat answers with it). */
  tagOf(key: string): string {
    if (this.answerMemo?.key !== key) this.answerMemo = { key, tag: reportTag(key) };
    return this.answerMemo.tag;
  }

  /**
   * The status of a heartbeat, received now, of the report whose content is `key` against
   * `desired`: a pure function of the two (a report received now is not stale), so computed once
   * per content and desired config. `desired` is compared by identity: every write of it is a new
   * object (save), so a new desired config is never answered with the old one's status.
   */
  heartbeatStatus(key: string, desired: DesiredState, compute: () => ComputedStatus): ComputedStatus {
    const memo = this.answerMemo?.key === key ? this.answerMemo : (this.answerMemo = { key, tag: reportTag(key) });
    if (memo.desired !== desired || !memo.computed) Object.assign(memo, { desired, computed: compute() });
    return memo.computed!;
  }

  /** Stores a heartbeat held only in memory (before the index is told of it). */
  persistHeartbeat() {
    const state = this.load();
    if (state?.heartbeatOnly && state.report) this.save({ report: state.report });
  }

  plan(): PlanState {
    return this.kv.get<PlanState>(KEY.plan) ?? INITIAL_PLAN_STATE;
  }

  setPlan(plan: PlanState) {
    this.putShown(KEY.plan, plan);
  }

  lifecycle(): LifecycleState | null {
    return this.kv.get<LifecycleState>(KEY.lifecycle) ?? null;
  }

  setLifecycle(lc: LifecycleState | null) {
    this.putShown(KEY.lifecycle, lc);
  }

  refresh(): RefreshState | null {
    if (this.refreshMemo === undefined) this.refreshMemo = this.kv.get<RefreshState>(KEY.refresh) ?? null;
    return this.refreshMemo;
  }

  setRefresh(r: RefreshState) {
    this.refreshMemo = r;
    this.putShown(KEY.refresh, r);
  }

  rebootRev(): number {
    return this.kv.get<number>(KEY.rebootRev) ?? 0;
  }

  setRebootRev(rev: number) {
    this.kv.put(KEY.rebootRev, rev);
  }

  /**
   * Read from storage once per life of the object, then from memory (a changed report asks every
   * time). The memory moves with each write, in or out of a transaction, and a rolled-back one
   * puts it back where it stood when the transaction began (`restore`), as storage goes back.
   */
  rolloutMarks(): Readonly<Record<string, RolloutMark>> {
    this.rolloutMarksMemo ??= Object.freeze(this.kv.get<Record<string, RolloutMark>>(KEY.rolloutMarks) ?? {});
    return this.rolloutMarksMemo;
  }

  setRolloutMarks(marks: Readonly<Record<string, RolloutMark>>) {
    if (Object.keys(marks).length) this.kv.put(KEY.rolloutMarks, marks);
    else this.kv.delete(KEY.rolloutMarks);
    // A copy: the caller's object may change after this; the memory must say what was stored.
    this.rolloutMarksMemo = Object.freeze({ ...marks });
  }

  /**
   * From memory once read or written, outside a transaction: a heartbeat asks on every report, and
   * each changed report's projection. Inside a transaction it is read from storage and not
   * remembered, so a rollback leaves no memory of what it undid.
   */
  projected(): ProjectedMark | undefined {
    if (this.commitHooks) return this.kv.get<ProjectedMark>(KEY.projected);
    if (this.projectedMemo === undefined) this.projectedMemo = this.kv.get<ProjectedMark>(KEY.projected) ?? null;
    return this.projectedMemo ?? undefined;
  }

  setProjected(mark: ProjectedMark) {
    this.kv.put(KEY.projected, mark);
    // Forgotten at once, and remembered again only once the write committed (at once outside a
    // transaction, as the projection's delivery writes it): every changed report's projection
    // reads the mark its previous one wrote, which is then a row read less. A transaction around
    // it that rolls back leaves it forgotten, and the next read takes what storage holds.
    this.projectedMemo = undefined;
    const kept = Object.freeze({ ...mark });
    this.onCommit(() => (this.projectedMemo = kept));
  }

  /** A coordinator release an old release left under its own key (moved into the outbox on open). */
  legacyRelease<T>(): T | undefined {
    return this.kv.get<T>(KEY.legacyPendingRelease);
  }

  dropLegacyRelease() {
    this.kv.delete(KEY.legacyPendingRelease);
  }

  /** Read once per life of the object: a changed report looks at it, and it changes seldom. */
  healthSent(): HealthSent | null {
    if (this.healthSentMemo === undefined) this.healthSentMemo = this.kv.get<HealthSent>(KEY.healthSent) ?? null;
    return this.healthSentMemo;
  }

  /** Written only when it changes; nothing the host or a waiter sees, so no wake. */
  setHealthSent(sent: HealthSent) {
    const was = this.healthSent();
    if (was && JSON.stringify(was) === JSON.stringify(sent)) return;
    this.kv.put(KEY.healthSent, sent);
    // Remembered once stored for good: after a rolled-back turn the memory still says what storage does.
    this.onCommit(() => (this.healthSentMemo = sent));
  }

  /** Planning, lifecycle and refresh state: shown in the view, so what waits on the view wakes. */
  private putShown(key: typeof KEY.plan | typeof KEY.lifecycle | typeof KEY.refresh, value: unknown) {
    if (value === null) this.kv.delete(key);
    else this.kv.put(key, value);
    this.onChange();
  }
}
