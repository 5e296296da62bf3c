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
import { ROLLOUT_FORMAT, storedFormat, upgradeRolloutStorage } from "./storage-format";
import { TargetRows, type NewTarget } from "./target-rows";

export class RolloutStore {
  readonly targets: TargetRows;
  readonly events: EventLog;
  private cache: { spec: RolloutSpec; core: Core } | null = null;
  private durations: { pass: number; sorted: number[] } | null = null;
  /** Told after each write of the core, in the writer's turn (the object wakes its waiters). */
  onCoreMoved: () => void = () => {};

  constructor(private readonly storage: DurableObjectStorage) {
    this.targets = new TargetRows(storage.sql);
    this.events = new EventLog(storage.sql);
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

  /** One synchronous storage turn: all of it commits, or none. */
  transaction<T>(fn: () => T): T {
    return this.storage.transactionSync(fn);
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

  /** A new rollout: its tables, its first pass, its spec and core. */
  create(spec: RolloutSpec, core: Core, targets: NewTarget[]) {
    this.ensureFormat();
    this.targets.insertFirstPass(spec.image, spec.version, targets);
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

  /** Stores the core and tells the long polls waiting for it to move. */
  putCore(core: Core) {
    this.kv.put("core", core);
    this.cache!.core = core;
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

  // ---- what the effects read ----

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
