/**
 * The rollout's parts: what its modules (./operator.ts, ./outcomes.ts, ./starting.ts, …) are
 * handed, never the object itself, so no module calls back into it. Built once per object by
 * ./assemble.ts from the constructor's arguments; nothing is set on them afterwards.
 */
import type { Outbox } from "../objects/kit/outbox";
import type { Scheduler } from "../objects/kit/scheduler";
import type { SampleRequest, SampleResult } from "./analysis-checks";
import type { RolloutStore } from "./store";

export type EffectKind =
  "project" | "audit" | "apply" | "slot" | "release" | "unlock" | "lock" | "channel" | "webhook_event" | "feed";

export interface RolloutParts {
  store: RolloutStore;
  /** Every effect on another binding leaves through it (./effects.ts). */
  outbox: Outbox<EffectKind>;
  /** The object's timers on its one alarm (./timers.ts). */
  scheduler: Scheduler;
  /** The clock the rollout decides with. */
  clock: () => number;
  /** Keeps the object alive for work that finishes after the answer (ctx.waitUntil). */
  background(work: Promise<unknown>): void;
  /** Takes one analysis sample (D1 and outbound checks), outside the object's storage turns. */
  analyze?: (req: SampleRequest) => Promise<SampleResult[]>;
}

/** After the caller's turn committed: the alarm, then delivery, waited for (operator) or not (events). */
export async function settle(p: RolloutParts, wait: boolean) {
  await p.scheduler.arm();
  if (wait) await p.outbox.flush();
  else p.background(p.outbox.flush());
}
