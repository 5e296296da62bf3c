/**
 * The coordinator's storage for health gates and the health rule (docs/reboot-safety.md), beside ./store.ts:
 * the fleet's default gates and hold, the inputs last read for them, and the servers that rebooted
 * and have not yet reported healthy. Same rules as the main store: synchronous KV, written first,
 * mirrored in memory after, rebuilt when the object wakes.
 */
import type { GateConfig, GateInputs, Hold } from "./gates";

/** The fleet-wide part: default gates for groups without their own, and a hold on every group. */
export interface FleetGates {
  config: GateConfig | null;
  hold: Hold | null;
  updated_at: number;
}

/**
 * A server that rebooted (its host reported steady state, or its ledger saw a new boot) and has
 * not yet reported healthy from the new boot. Under `release_on: healthy_report` its slot is still
 * held meanwhile; it counts for the `max_rebooted_unhealthy` gate either way.
 */
export interface Recovering {
  server_id: string;
  /** The FleetLock id it rebooted under, and its group. */
  id: string;
  group: string;
  /** When the reboot was first seen, and the boot it came back with (once its ledger saw it). */
  since: number;
  boot_id: string | null;
  /** A report from this boot with every agent realized, seen before the reboot itself was. */
  realized_boot: string | null;
  /** Set once the group's health_timeout_s passed without a healthy report. */
  unhealthy_at: number | null;
}

const GATE_KEY = {
  fleet: "gates",
  inputs: "gate_inputs",
  recovering: (serverId: string) => `recovering:${serverId}`,
} as const;

const EMPTY_INPUTS: GateInputs = { health: null, rollouts: null, external: {}, rebootedUnhealthy: 0 };

export class GateStore {
  private fleetMem: FleetGates | null | undefined;
  private inputsMem: GateInputs | undefined;
  private recoveringMem: Map<string, Recovering> | undefined;

  constructor(private readonly storage: DurableObjectStorage) {}

  private get kv() {
    return this.storage.kv;
  }

  fleet(): FleetGates | null {
    if (this.fleetMem === undefined) this.fleetMem = this.kv.get<FleetGates>(GATE_KEY.fleet) ?? null;
    return this.fleetMem;
  }

  saveFleet(next: FleetGates) {
    this.kv.put(GATE_KEY.fleet, next);
    this.fleetMem = next;
  }

  /** The inputs as last read (index counts and external answers carry their own read time). */
  inputs(): GateInputs {
    if (this.inputsMem === undefined) this.inputsMem = { ...EMPTY_INPUTS, ...this.kv.get<GateInputs>(GATE_KEY.inputs) };
    return { ...this.inputsMem, rebootedUnhealthy: this.recovering().size };
  }

  /** Stored only when a value changed, not each time it was read again. */
  saveInputs(next: Omit<GateInputs, "rebootedUnhealthy">) {
    const before = this.inputs();
    const same = (a: unknown, b: unknown) => JSON.stringify(a) === JSON.stringify(b);
    const strip = (i: Omit<GateInputs, "rebootedUnhealthy">) => ({
      health: i.health && { ...i.health, at: 0 },
      rollouts: i.rollouts && { ...i.rollouts, at: 0 },
      external: Object.fromEntries(Object.entries(i.external).map(([k, v]) => [k, { ...v, at: 0 }])),
    });
    const value = { health: next.health, rollouts: next.rollouts, external: next.external };
    // The read times move in memory every refresh; storage learns them with the next change.
    if (!same(strip(before), strip(value))) this.kv.put(GATE_KEY.inputs, value);
    this.inputsMem = { ...value, rebootedUnhealthy: 0 };
  }

  recovering(): Map<string, Recovering> {
    if (!this.recoveringMem) {
      this.recoveringMem = new Map();
      for (const [, r] of this.kv.list<Recovering>({ prefix: "recovering:" })) this.recoveringMem.set(r.server_id, r);
    }
    return this.recoveringMem;
  }

  saveRecovering(r: Recovering) {
    this.kv.put(GATE_KEY.recovering(r.server_id), r);
    this.recovering().set(r.server_id, r);
  }

  dropRecovering(serverId: string) {
    if (!this.recovering().has(serverId)) return;
    this.kv.delete(GATE_KEY.recovering(serverId));
    this.recovering().delete(serverId);
  }

  /** The fleet was deleted: storage is gone (./store.ts wipe), so is the mirror. */
  forget() {
    this.fleetMem = undefined;
    this.inputsMem = undefined;
    this.recoveringMem = undefined;
  }
}
