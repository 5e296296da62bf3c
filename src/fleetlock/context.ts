/**
 * What the coordinator's decision modules (grants.ts, groups.ts, rollout-slots.ts) are handed:
 * its parts, never the object itself, so no module calls back into it.
 */
import type { Scheduler } from "../objects/kit/scheduler";
import type { CoordinatorEffects } from "./effects";
import type { GateKeeper } from "./gate-keeper";
import type { GateStore } from "./gate-store";
import type { ParkedHosts } from "./parked";
import type { CoordinatorStore } from "./store";

export interface Coordination {
  store: CoordinatorStore;
  effects: CoordinatorEffects;
  scheduler: Scheduler;
  parked: ParkedHosts;
  /** Health gates: their settings, inputs and the servers rebooted and not yet healthy (issue 17). */
  gates: GateKeeper;
  gateStore: GateStore;
  /** The clock every grant, window and wait is decided with; tests move it. */
  clock: () => number;
}
