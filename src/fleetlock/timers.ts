/**
 * The coordinator's timers, all on its one alarm (src/objects/kit/scheduler.ts), by name: outbox
 * redelivery, reservations ending (a fleetlock_id's, a hostname's: the reserving ledger is asked),
 * the queue of parked hosts, the health gates' read of their inputs, the webhooks' send queue, and
 * a drift fix's hold reaching its end (the server's ledger is asked whether the fix was written).
 * A timer named `kind:key` is handled by its kind's handler.
 */
import type { TimerHandler } from "../objects/kit/scheduler";
import { FIX_HOLD_TIMER, settleFixHold } from "./fix-budget";
import { GATES_TIMER } from "./gate-keeper";
import * as gateRules from "./gate-rules";
import * as identity from "./identity";
import * as names from "./names";
import { QUEUE_TIMER } from "./parked";
import type { CoordinatorParts } from "./parts";

/** The webhooks' send queue (src/webhooks/dispatch.ts): its next retry, or a send's lease. */
export const WEBHOOKS_TIMER = "webhooks";

const untilOf = (payload: unknown) => (payload as { until: number }).until;

const coordinatorTimers = (p: CoordinatorParts): Record<string, TimerHandler> => ({
  outbox: () => p.outbox.flush(),
  reservation: (payload, name) =>
    identity.settleReservation(p, p.ask, name.slice("reservation:".length), untilOf(payload)),
  hostname: (payload, name) => names.settleHostname(p, p.ask, name.slice("hostname:".length), untilOf(payload)),
  [QUEUE_TIMER]: () => p.parked.fired(),
  [GATES_TIMER]: () => gateRules.readInputs(p),
  [WEBHOOKS_TIMER]: () => p.webhooks.pump(),
  [FIX_HOLD_TIMER]: (payload, name) => settleFixHold(p, name.slice(`${FIX_HOLD_TIMER}:`.length), untilOf(payload)),
});

/** The alarm: every due timer, by its handler. */
export const fireTimers = (p: CoordinatorParts) => p.scheduler.fire(coordinatorTimers(p));
