/**
 * Builds the coordinator's parts (./parts.ts) from the object's constructor arguments and wires
 * them to each other, once: every part gets what it calls in its constructor, and nothing is set
 * on a part afterwards. The parts call each other only once built (closures over `parts` run after
 * this returns), so the order below is the order of what each constructor needs.
 */
import { getDb } from "../db/client";
import type { Env } from "../env";
import { Outbox } from "../objects/kit/outbox";
import { Scheduler } from "../objects/kit/scheduler";
import { socketRoom } from "../objects/kit/sockets";
import { ledgerOf } from "../objects/stubs";
import { budgetClosure, BudgetWatch } from "./disruption";
import { DisruptionStore } from "./disruption-store";
import { audit, changed, coordinatorEffects, emit } from "./effects";
import { boundOlderFixHolds } from "./fix-budget";
import { GateKeeper, type GateChange } from "./gate-keeper";
import { externalAnswered } from "./gate-rules";
import { GateStore } from "./gate-store";
import { expireHealth, healthWake } from "./health";
import { reportStuck, stuckWake } from "./reboot-events";
import { ParkedHosts, type QueueHooks } from "./parked";
import type { CoordinatorParts } from "./parts";
import { closureOf } from "./queue";
import { CoordinatorStore } from "./store";
import { WEBHOOKS_TIMER } from "./timers";
import { WebhookDispatcher } from "../webhooks/dispatch";
import { WebhookStore } from "../webhooks/store";

/**
 * Calls under way at once. Each receiver has a lane (one call at a time, in enqueue order), so
 * this bounds how many receivers are called at once: a few, as there are few of them.
 */
const CALL_SLOTS = 4;

/** `env` is read at each use, not captured: the runtime's (and a test's) bindings as they are then. */
export function assemble(ctx: DurableObjectState, env: () => Env, clock: () => number): CoordinatorParts {
  const db = () => getDb(env().DB);
  const scheduler = new Scheduler(ctx.storage);
  // What the budget counts changed (a slot, a hold, a server down or back): looked at once per turn.
  const budgetWatch = new BudgetWatch(() => parts);
  const store = new CoordinatorStore(ctx.storage, (group) => {
    changed(parts, group);
    budgetWatch.touch();
  });
  // The budget's count changed (a fix's or rollout target's unit, a server down or back): pages
  // showing it are told, though no group changed.
  const disruption = new DisruptionStore(
    ctx.storage,
    (shown) => {
      if (shown) changed(parts);
      budgetWatch.touch();
    },
    () => boundOlderFixHolds(parts),
  );
  const gateStore = new GateStore(ctx.storage);
  const webhookStore = new WebhookStore(ctx.storage);
  const webhooks = new WebhookDispatcher(webhookStore, {
    timer: (at, opts) => {
      if (at === null) scheduler.cancel(WEBHOOKS_TIMER);
      else scheduler.schedule(WEBHOOKS_TIMER, at, null, opts);
      void scheduler.arm().catch(() => undefined);
    },
    waitUntil: (p) => ctx.waitUntil(p),
  });
  // A lane per receiver (a rollout, the console feed): one that hangs holds only its own calls.
  const outbox = new Outbox(ctx.storage, scheduler, coordinatorEffects({ db, env, webhooks }), db, CALL_SLOTS);
  // An external check is fetched in the background; its answer drains the queues in a turn of its own.
  const gates = new GateKeeper(store, gateStore, scheduler, db, (change) => gateChanged(parts, change), {
    background: (work) => ctx.waitUntil(work),
    answered: () => externalAnswered(parts),
  });
  // The queue consults the health gates before every grant (docs/reboot-safety.md).
  const hooks: QueueHooks = {
    closed: (_name, g, now) => closureOf(g, now, g.paused ? null : gates.closed(g, now)),
    wakeAt: (_name, g, now) => gates.wakeAt(g, now),
    drained: (name, g, now) => void gates.note(name, g, now),
    tidy: (name, g, now) => reportStuck(parts, name, expireHealth(parts, name, g, now), now),
    dueAt: (g) => Math.min(healthWake(g) ?? Infinity, stuckWake(store, g) ?? Infinity),
    budget: (serverId, extra) => budgetClosure(parts, serverId, extra),
  };
  const trust = Number(env().PARK_TRUST_S);
  const trustMs = env().PARK_TRUST_S && Number.isFinite(trust) && trust >= 0 ? trust * 1000 : null;
  // The parts' clock is read at each call, not captured: a test that moves it moves the queue too.
  const parked = new ParkedHosts(
    { store, outbox, scheduler, webhooks },
    () => parts.clock(),
    socketRoom(ctx),
    hooks,
    trustMs,
  );
  const parts: CoordinatorParts = {
    store,
    outbox,
    scheduler,
    parked,
    gates,
    gateStore,
    disruption,
    budgetWatch,
    webhooks,
    webhookStore,
    ask: (serverId) => ledgerOf(env(), serverId).heldNames(),
    // The ledger then sends its next realized report, which the hold may wait on (./ledger-side.ts).
    askDesired: async (serverId) => ledgerOf(env(), serverId).fixHoldAsked(),
    clock,
  };
  return parts;
}

/** A group's first closed gate changed: audited, and reported to the fleet's webhooks. */
function gateChanged(p: CoordinatorParts, { group, closed, was }: GateChange) {
  const fleetId = p.store.config?.fleet_id;
  const at = p.clock();
  if (closed) {
    emit(
      p,
      fleetId,
      "reboot.gate_closed",
      `group:${group}`,
      `Reboots in group ${group} are held: ${closed.reason}`,
      {
        group,
        gate: closed.gate,
        kind: closed.kind,
        reason: closed.reason,
        blocked_by: [
          {
            kind: closed.gate === "hold" ? "hold" : "gate",
            message: `the ${closed.gate} gate is closed: ${closed.reason}`,
            since: new Date(at).toISOString(),
            detail: closed.reason,
          },
        ],
      },
      at,
    );
  } else if (was) {
    emit(
      p,
      fleetId,
      "reboot.gate_opened",
      `group:${group}`,
      `Reboots in group ${group} may go on: the ${was.gate} gate opened`,
      {
        group,
        gate: was.gate,
        closed_since: new Date(was.since).toISOString(),
      },
      at,
    );
  }
  void audit(
    p,
    [
      {
        actor: "harbormaster",
        action: closed ? "reboot_group.gate_closed" : "reboot_group.gate_opened",
        target: `fleet:${fleetId ?? "?"}`,
        details: closed ? { group, gate: closed.gate, reason: closed.reason } : { group, gate: was?.gate },
      },
    ],
    { wait: false },
  );
}
