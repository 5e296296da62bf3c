/**
 * What the coordinator's decision modules (grants.ts, groups.ts, rollout-slots.ts) are handed:
 * its parts, never the object itself, so no module calls back into it.
 */
import type { Scheduler } from "../objects/kit/scheduler";
import type { DisruptionStore } from "./disruption-store";
import type { CoordinatorEffects } from "./effects";
import type { GateKeeper } from "./gate-keeper";
import type { GateStore } from "./gate-store";
import type { ParkedHosts } from "./parked";
import type { CoordinatorStore } from "./store";
import type { WebhookDispatcher } from "../webhooks/dispatch";
import type { WebhookStore } from "../webhooks/store";

export interface Coordination {
  store: CoordinatorStore;
  effects: CoordinatorEffects;
  scheduler: Scheduler;
  parked: ParkedHosts;
  /** Health gates: their settings, inputs and the servers rebooted and not yet healthy. */
  gates: GateKeeper;
  gateStore: GateStore;
  /** The disruption budget's own records (members, unavailable servers, rollout holds, waits). */
  disruption: DisruptionStore;
  /** Notices once per turn that the budget may have freed (./disruption.ts BudgetWatch). */
  budgetWatch: { touch(force?: boolean): void };
  /** The fleet's webhooks: this object sends them, fed by every owner's events (src/webhooks/). */
  webhooks: WebhookDispatcher;
  webhookStore: WebhookStore;
  /** The clock every grant, window and wait is decided with; tests move it. */
  clock: () => number;
}
