/**
 * What a rollout's modules work with: its store, its outbox (every effect on another binding
 * leaves through it), its timers, its clock, and the runtime's hook for work that finishes after
 * the answer. Modules take these and never call back into the object's class.
 */
import type { Outbox } from "../objects/kit/outbox";
import type { Scheduler } from "../objects/kit/scheduler";
import type { SampleRequest, SampleResult } from "./analysis-checks";
import type { RolloutStore } from "./store";

export type EffectKind =
  "project" | "audit" | "apply" | "slot" | "release" | "unlock" | "lock" | "channel" | "webhook_event" | "feed";

export interface RolloutParts {
  store: RolloutStore;
  outbox: Outbox<EffectKind>;
  timers: Scheduler;
  clock: () => number;
  /** Keeps the object alive for work that finishes after the answer (ctx.waitUntil). */
  background(work: Promise<unknown>): void;
  /** Takes one analysis sample (D1 and outbound checks), outside the object's storage turns. */
  analyze?: (req: SampleRequest) => Promise<SampleResult[]>;
}

/** After the caller's turn committed: the alarm, then delivery, waited for (operator) or not (events). */
export async function settle(p: RolloutParts, wait: boolean) {
  await p.timers.arm();
  if (wait) await p.outbox.flush();
  else p.background(p.outbox.flush());
}
