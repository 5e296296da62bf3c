/**
 * The coordinator's parts: what its decision modules (grants.ts, groups.ts, identity.ts, …) are
 * handed, never the object itself, so no module calls back into it. Built once per object by
 * ./assemble.ts from the constructor's arguments; nothing is set on them afterwards.
 */
import type { Scheduler } from "../objects/kit/scheduler";
import type { DisruptionStore } from "./disruption-store";
import type { CoordinatorOutbox } from "./effects";
import type { GateKeeper } from "./gate-keeper";
import type { GateStore } from "./gate-store";
import type { ParkedHosts } from "./parked";
import type { AskLedger, CoordinatorStore } from "./store";
import type { WebhookDispatcher } from "../webhooks/dispatch";
import type { WebhookStore } from "../webhooks/store";

export interface CoordinatorParts {
  store: CoordinatorStore;
  /** Audit rows and console notices (./effects.ts); webhook deliveries have their own queue. */
  outbox: CoordinatorOutbox;
  /** The object's timers on its one alarm (./timers.ts); set in real time, `scheduler.now()`. */
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
  /** How the coordinator asks a server's ledger what it holds (a reservation ending, ./names.ts). */
  ask: AskLedger;
  /**
   * How it asks a server's ledger for its desired generation and whether it is realized (a drift
   * fix's hold ending, ./fix-budget.ts); null: no such server.
   */
  askDesired: (serverId: string) => Promise<{ generation: number; realized: boolean } | null>;
  /** The clock every grant, window and wait is decided with; tests move it. */
  clock: () => number;
}
