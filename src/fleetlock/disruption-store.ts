/**
 * What the coordinator keeps for the fleet's disruption budget (./disruption.ts), besides the
 * reboot slots its groups hold: the fleet's servers as their ledgers described them (hostname,
 * labels), the servers it learned are unavailable, the rollout targets disrupting a server without
 * a reboot slot, and the rollouts waiting for budget. Synchronous KV, mirrored in memory and
 * rebuilt on wake like ./store.ts, so a decision reads and writes in one turn.
 */
import type { Member } from "./budget";

export interface StoredMember extends Member {
  /** The ledger's clock when it described the server: an older description never wins. */
  at: number;
}

/** A server the coordinator learned is unavailable (stale or failed) from its ledger. */
export interface Down {
  status: string;
  since: number;
  /**
   * Counted failed by a drift fix's bound, not by its ledger (./fix-budget.ts): its write never
   * reported realized. Cleared like any failed server's, or by an operator's release.
   */
  by_fix?: boolean;
}

/** A rollout target disrupting its server without a reboot slot (an applying target), or a drift fix. */
export interface DisruptionHold {
  holder: string;
  server_id: string;
  rollout_id: string;
  since: number;
  /**
   * A drift fix's hold while a call may still write under it (./fix-budget.ts): when its server's
   * ledger is asked whether the write happened (real time). Null (or absent) once no call may:
   * the server's realized report of the written generation ends it.
   */
  until?: number | null;
  /** A drift fix's hold: the desired generation the first fix saw (a write goes past it). */
  generation?: number;
  /**
   * A drift fix's hold while `until` is set: the fix calls allowed to write whose outcome is not
   * known yet (absent on a hold stored before calls were recorded).
   */
  calls?: string[];
  /** A drift fix's hold: the newest desired generation known written under it. */
  written?: number;
  /** A drift fix's hold while `until` is set: the newest generation its server reported realized. */
  realized?: number;
  /**
   * A drift fix's hold once its write is known (real time): the server is counted failed if it
   * has not reported realized FIX_REALIZE_BOUND_MS later.
   */
  known_at?: number;
}

/** A rollout with targets refused for budget: woken (through the outbox) once budget frees. */
export interface BudgetWait {
  rollout_id: string;
  since: number;
  servers: string[];
}

const KEY = {
  member: (id: string) => `member:${id}`,
  down: (id: string) => `down:${id}`,
  hold: (holder: string) => `dhold:${holder}`,
  wait: (rolloutId: string) => `bwait:${rolloutId}`,
} as const;

interface Mirror {
  members: Map<string, StoredMember>;
  down: Map<string, Down>;
  holds: Map<string, DisruptionHold>;
  waits: Map<string, BudgetWait>;
}

export class DisruptionStore {
  private mem: Mirror | null = null;

  /**
   * `onChange`: something the count reads changed (called in the caller's turn); `shown`: a unit
   * taken or freed, or a server down or back, which operators' pages show (a member's labels are not).
   */
  constructor(
    private readonly storage: DurableObjectStorage,
    private readonly onChange: (shown: boolean) => void,
    /** The mirror was just read from storage (once per wake): what older code stored may be brought up to date. */
    private readonly loaded: () => void = () => {},
  ) {}

  private get kv() {
    return this.storage.kv;
  }

  private get m(): Mirror {
    if (!this.mem) {
      const load = <T>(prefix: string) =>
        new Map([...this.kv.list<T>({ prefix })].map(([k, v]) => [k.slice(prefix.length), v] as const));
      this.mem = {
        members: load<StoredMember>("member:"),
        down: load<Down>("down:"),
        holds: load<DisruptionHold>("dhold:"),
        waits: load<BudgetWait>("bwait:"),
      };
      this.loaded();
    }
    return this.mem;
  }

  members(): ReadonlyMap<string, StoredMember> {
    return this.m.members;
  }

  /** Stores a ledger's description unless an equal or newer one is kept; true when it changed. */
  putMember(serverId: string, m: StoredMember): boolean {
    const was = this.m.members.get(serverId);
    if (was && was.at > m.at) return false;
    if (was && was.hostname === m.hostname && JSON.stringify(was.labels) === JSON.stringify(m.labels)) return false;
    this.kv.put(KEY.member(serverId), m);
    this.m.members.set(serverId, m);
    this.onChange(false);
    return true;
  }

  /** The server left the fleet: it is no longer counted, disrupted or not. */
  dropServer(serverId: string) {
    let changed = false;
    if (this.m.members.delete(serverId)) {
      this.kv.delete(KEY.member(serverId));
      changed = true;
    }
    if (this.m.down.delete(serverId)) {
      this.kv.delete(KEY.down(serverId));
      changed = true;
    }
    for (const [holder, h] of this.m.holds)
      if (h.server_id === serverId) {
        this.m.holds.delete(holder);
        this.kv.delete(KEY.hold(holder));
        changed = true;
      }
    if (changed) this.onChange(true);
  }

  down(): ReadonlyMap<string, Down> {
    return this.m.down;
  }

  setDown(serverId: string, down: Down | null) {
    const was = this.m.down.get(serverId);
    if (down === null) {
      if (!was) return;
      this.m.down.delete(serverId);
      this.kv.delete(KEY.down(serverId));
    } else {
      // A ledger's own report of the status takes over from a drift fix's count of it.
      if (was?.status === down.status && !was.by_fix === !down.by_fix) return;
      this.m.down.set(serverId, down);
      this.kv.put(KEY.down(serverId), down);
    }
    this.onChange(true);
  }

  holds(): ReadonlyMap<string, DisruptionHold> {
    return this.m.holds;
  }

  putHold(h: DisruptionHold) {
    if (this.m.holds.has(h.holder)) return;
    this.m.holds.set(h.holder, h);
    this.kv.put(KEY.hold(h.holder), h);
    this.onChange(true);
  }

  /** Replaces a hold kept under the same holder (its end moved, or its write became known). */
  replaceHold(h: DisruptionHold) {
    if (!this.m.holds.has(h.holder)) return;
    this.m.holds.set(h.holder, h);
    this.kv.put(KEY.hold(h.holder), h);
  }

  dropHold(holder: string): DisruptionHold | null {
    const h = this.m.holds.get(holder);
    if (!h) return null;
    this.m.holds.delete(holder);
    this.kv.delete(KEY.hold(holder));
    this.onChange(true);
    return h;
  }

  waits(): ReadonlyMap<string, BudgetWait> {
    return this.m.waits;
  }

  /** A rollout's target waits for budget; one record per rollout names every waiting server. */
  addWait(rolloutId: string, serverId: string, now: number) {
    const was = this.m.waits.get(rolloutId);
    if (was?.servers.includes(serverId)) return;
    const next: BudgetWait = {
      rollout_id: rolloutId,
      since: was?.since ?? now,
      servers: [...(was?.servers ?? []), serverId],
    };
    this.m.waits.set(rolloutId, next);
    this.kv.put(KEY.wait(rolloutId), next);
  }

  dropWait(rolloutId: string) {
    if (!this.m.waits.delete(rolloutId)) return;
    this.kv.delete(KEY.wait(rolloutId));
  }
}
