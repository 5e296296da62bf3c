/**
 * A Rollout object's storage: its spec and core (KV, cached in memory), its targets and event log
 * (SQL tables, in the format of storage-format.ts), the flags its effects read, and the durations
 * of the current pass's done targets (in memory, rebuilt after a wake). Every method is
 * synchronous, so what a caller writes in one turn commits together. Long polls wait in the
 * Worker (./waits.ts): a moved core is told to `onCoreMoved`, which wakes them.
 */
import type { ChannelMove } from "./channel";
import { EventLog } from "./event-log";
import { zeroCounts, type Core, type RolloutSpec } from "./machine";
import type { BlockedBy } from "../model/blocked-by";
import { sortedInsert } from "./progress";
import { Samples } from "./samples";
import type { Plan } from "./strategy";
import { ROLLOUT_FORMAT, storedFormat, upgradeRolloutStorage } from "./storage-format";
import { TargetRows, type NewTarget } from "./target-rows";

export class RolloutStore {
  readonly targets: TargetRows;
  readonly events: EventLog;
  readonly samples: Samples;
  private cache: { spec: RolloutSpec; core: Core } | null = null;
  private durations: { pass: number; sorted: number[] } | null = null;

  constructor(
    private readonly storage: DurableObjectStorage,
    /** Told after each write of the core, in the writer's turn (the object wakes its waiters). */
    private readonly onCoreMoved: () => void = () => {},
  ) {
    this.targets = new TargetRows(storage.sql);
    this.events = new EventLog(storage.sql);
    this.samples = new Samples(storage.sql);
    // A rollout written by older code is brought to this code's format once, before any call
    // reads it; an object that holds no rollout is left empty until its rollout starts.
    if (storedFormat(storage.kv) > 0) storage.transactionSync(() => this.ensureFormat());
  }

  private get kv() {
    return this.storage.kv;
  }

  /** Within the caller's transaction: the steps and the stamp commit with what follows them. */
  private ensureFormat() {
    const from = storedFormat(this.kv);
    if (from !== ROLLOUT_FORMAT) upgradeRolloutStorage(this.storage, from);
  }

  /**
   * One synchronous storage turn: all of it commits, or none. The core is stored once, at the
   * end of the outermost turn, however many changes moved it (a target's end and the next one's
   * start are one turn): each put is a row written.
   */
  transaction<T>(fn: () => T): T {
    // Inside another turn this one is a savepoint: the outer turn's core, moved in memory and not
    // stored yet, must outlive this one's rollback (a caught failure), so it is put back as it was.
    const outer = this.depth > 0 ? { cache: this.cache && { ...this.cache }, unstored: this.coreUnstored } : null;
    const hooks = this.commitHooks ?? [];
    const mark = hooks.length;
    this.commitHooks = hooks;
    this.depth++;
    let out: T;
    try {
      out = this.storage.transactionSync(() => {
        const result = fn();
        if (this.depth === 1) this.storeCore();
        return result;
      });
    } catch (err) {
      // Undone: what the turn's writers kept in memory beside their rows is read again, and what
      // they meant to learn once it committed is not learnt.
      hooks.length = mark;
      this.samples.forget();
      this.targets.forget();
      this.timersSet.clear();
      this.cache = outer ? outer.cache : null;
      this.coreUnstored = outer ? outer.unstored : false;
      throw err;
    } finally {
      this.depth--;
      if (this.depth === 0) this.commitHooks = null;
    }
    if (this.depth === 0) for (const hook of hooks) hook();
    return out;
  }
  /** Transactions open (nested ones run inside the outermost). */
  private depth = 0;

  /**
   * Runs `fn` once the outermost transaction committed (at once outside one), unless the
   * transaction or savepoint it was registered in rolled back: the kit's memory of its tables and
   * timers (Scheduler, Outbox) must not move for a write that does not stand. A write outside a
   * transaction is not undone by a throw (the runtime's implicit turn keeps it), so it is learnt
   * at once.
   */
  onCommit(fn: () => void) {
    if (this.commitHooks) this.commitHooks.push(fn);
    else fn();
  }
  private commitHooks: (() => void)[] | null = null;
  /** The core in memory moved and is stored when the outermost transaction ends. */
  private coreUnstored = false;

  private storeCore() {
    if (!this.coreUnstored) return;
    this.coreUnstored = false;
    this.kv.put("core", this.cache!.core);
  }

  // ---- spec and core ----

  load() {
    if (!this.cache) {
      const spec = this.kv.get<RolloutSpec>("spec");
      const core = this.kv.get<Core>("core");
      if (!spec || !core) return null;
      // Cores stored before targets could wait for budget have no such count: none waited.
      this.cache = { spec, core: { ...core, counts: { ...zeroCounts(), ...core.counts } } };
    }
    return this.cache;
  }

  /** A new rollout: its tables, its first pass, its spec and core (and its strategy's plan, if any). */
  create(spec: RolloutSpec, core: Core, targets: NewTarget[], plan: Plan | null = null) {
    this.ensureFormat();
    this.targets.insertFirstPass(spec.image, spec.version, targets);
    if (targets.length) this.setIndexFrom(0);
    if (plan) {
      this.kv.put("plan", plan);
      this.kv.put("phase", { phase: 0, started_at: null, until: null, seq: 0, failures: [] } satisfies PhaseState);
    }
    this.kv.put("spec", spec);
    this.kv.put("core", core);
    this.cache = { spec, core };
  }

  // ---- why a target waits (its blocked_by), kept while it waits ----

  blocked(pass: number, serverId: string): BlockedBy[] | undefined {
    return this.kv.get<BlockedBy[]>(`blocked:${pass}:${serverId}`);
  }

  setBlocked(pass: number, serverId: string, blocked: BlockedBy[] | null) {
    if (blocked === null) this.kv.delete(`blocked:${pass}:${serverId}`);
    else this.kv.put(`blocked:${pass}:${serverId}`, blocked);
  }

  /** Whether its targets take a unit of the fleet's disruption budget (the fleet's budget was set or removed). */
  setBudget(on: boolean) {
    const spec = { ...this.load()!.spec, budget: on };
    this.kv.put("spec", spec);
    this.cache!.spec = spec;
  }

  /** Every waiting target of a pass ended at once (skipped): their reasons go in the same turn. */
  dropBlockedOfPass(pass: number) {
    for (const [key] of this.kv.list({ prefix: `blocked:${pass}:` })) this.kv.delete(key);
  }

  /**
   * Stores the core (inside a transaction: when it ends) and tells the long polls waiting for it
   * to move (they read it after the turn).
   */
  putCore(core: Core) {
    this.cache!.core = core;
    this.coreUnstored = true;
    if (this.depth === 0) this.storeCore();
    this.onCoreMoved();
  }

  // ---- the current pass's pace ----

  /** Durations of the current pass's done targets, sorted. */
  doneDurations(): number[] {
    const { core } = this.load()!;
    if (!this.durations || this.durations.pass !== core.pass) {
      this.durations = { pass: core.pass, sorted: this.targets.doneDurations(core.pass) };
    }
    return this.durations.sorted;
  }

  /**
   * A target of `pass` is done, its duration already in its row. Only a list already in memory
   * takes it: a list read now would hold it already.
   */
  recordDuration(pass: number, ms: number) {
    if (this.durations?.pass === pass) sortedInsert(this.durations.sorted, ms);
  }

  // ---- the strategy ----

  /** The strategy's plan; null for a rollout without one (one wave). */
  plan(): Plan | null {
    if (this.planCache === undefined) this.planCache = this.kv.get<Plan>("plan") ?? null;
    return this.planCache;
  }
  private planCache: Plan | null | undefined;

  phase(): PhaseState | null {
    return this.kv.get<PhaseState>("phase") ?? null;
  }

  setPhase(phase: PhaseState) {
    this.kv.put("phase", phase);
    this.onCoreMoved();
  }

  /** Who paused the rollout and when (null: its strategy did, or it is not paused). */
  pausedBy(): { by: string | null; at: number } | null {
    return this.kv.get<{ by: string | null; at: number }>("paused_by") ?? null;
  }

  setPausedBy(value: { by: string | null; at: number } | null) {
    if (value) this.kv.put("paused_by", value);
    else this.kv.delete("paused_by");
  }

  /**
   * When the rollout was cancelled, ascending, for the grace of the targets then in flight
   * (./deadlines.ts). Kept after a rollback from a cancel: those targets keep their grace. Rollouts
   * cancelled by older code have none recorded (their core's ended_at says when).
   */
  cancels(): number[] {
    return this.kv.get<number[]>("cancels") ?? [];
  }

  addCancel(at: number) {
    this.kv.put("cancels", [...this.cancels(), at]);
  }

  // ---- the timers this object knows it set (./timer-memo.ts) ----

  /**
   * Per timer name, when this object last set it for (an upper bound on its stored due time), or
   * null once it cancelled it; absent when unknown. Forgotten with an undone turn and, per name,
   * when the timer fires (the scheduler deletes or moves its row then).
   */
  readonly timersSet = new Map<string, number | null>();

  // ---- what the effects read ----

  /**
   * The first seq of the first pass the index has not taken yet; null once it took them all, or
   * for a rollout stored by older code (its targets were each marked dirty instead).
   */
  indexFrom(): number | null {
    return this.kv.get<number>("index_from") ?? null;
  }

  setIndexFrom(seq: number | null) {
    if (seq === null) this.kv.delete("index_from");
    else this.kv.put("index_from", seq);
  }

  /** Whether this rollout has let its (fleet, agent) go. */
  unlocked(): boolean {
    return this.kv.get<boolean>("unlocked") ?? false;
  }

  setUnlocked(value: boolean) {
    this.kv.put("unlocked", value);
  }

  channel(): ChannelMove | undefined {
    return this.kv.get<ChannelMove>("channel");
  }

  setChannel(move: ChannelMove) {
    this.kv.put("channel", move);
  }
}

/** Where a strategy's rollout is in its plan. */
export interface PhaseState {
  /** The current phase (index into the plan's phases). */
  phase: number;
  started_at: number | null;
  /** The end of a pause's or an analysis' bake time. */
  until: number | null;
  /** The number of the analysis sample asked for last; an answer for another is stale. */
  seq: number;
  /** Per check of the current analysis: failed samples so far. */
  failures: number[];
  /** A pause until resumed is waiting for its resume. */
  awaiting_resume?: boolean;
  /** The analysis held through its bake time. */
  passed?: boolean;
}
