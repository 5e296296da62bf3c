/**
 * Builds the coordinator's parts and wires them to each other (./durable-object.ts stays a thin
 * surface): the store, scheduler and outbox, the queue of parked hosts, and the health gates the
 * queue consults before every grant (docs/reboot-safety.md).
 */
import { getDb } from "../db/client";
import type { Env } from "../env";
import { Scheduler } from "../objects/kit/scheduler";
import { socketRoom } from "../objects/kit/sockets";
import type { Coordination } from "./context";
import { budgetClosure, BudgetWatch } from "./disruption";
import { DisruptionStore } from "./disruption-store";
import { CoordinatorEffects, emit } from "./effects";
import { GateKeeper, type GateChange } from "./gate-keeper";
import { GateStore } from "./gate-store";
import { expireHealth, healthWake } from "./health";
import { reportStuck, stuckWake } from "./reboot-events";
import { ParkedHosts } from "./parked";
import { closureOf } from "./queue";
import { CoordinatorStore } from "./store";
import { WebhookDispatcher } from "../webhooks/dispatch";
import { WebhookStore } from "../webhooks/store";

/** The webhooks' send queue (src/webhooks/dispatch.ts): its next retry, or a send's lease. */
export const WEBHOOKS_TIMER = "webhooks";

export function assemble(ctx: DurableObjectState, env: () => Env, clock: () => number): Coordination {
  const scheduler = new Scheduler(ctx.storage);
  const store = new CoordinatorStore(ctx.storage);
  const db = () => getDb(env().DB);
  const effects = new CoordinatorEffects(ctx.storage, scheduler, db, env);
  effects.fleetId = () => store.config?.fleet_id;
  const disruption = new DisruptionStore(ctx.storage);
  const budgetWatch = new BudgetWatch(() => c);
  store.onChange = (group) => {
    effects.changed(group);
    budgetWatch.touch();
  };
  disruption.onChange = () => budgetWatch.touch();
  const gateStore = new GateStore(ctx.storage);
  const gates = new GateKeeper(store, gateStore, scheduler, db);
  const trust = Number(env().PARK_TRUST_S);
  const trustMs = env().PARK_TRUST_S && Number.isFinite(trust) && trust >= 0 ? trust * 1000 : null;
  const parked = new ParkedHosts(store, effects, scheduler, clock, socketRoom(ctx), trustMs);
  parked.hooks = {
    closed: (_name, g, now) => closureOf(g, now, g.paused ? null : gates.closed(g, now)),
    wakeAt: (_name, g, now) => gates.wakeAt(g, now),
    drained: (name, g, now) => void gates.note(name, g, now),
    tidy: (name, g, now) => reportStuck(effects, store, name, expireHealth(c, name, g, now), now),
    dueAt: (g) => Math.min(healthWake(g) ?? Infinity, stuckWake(store, g) ?? Infinity),
    budget: (serverId, extra) => budgetClosure(c, serverId, extra),
  };
  const webhookStore = new WebhookStore(ctx.storage);
  const webhooks = new WebhookDispatcher(webhookStore, {
    timer: (at, opts) => {
      if (at === null) scheduler.cancel(WEBHOOKS_TIMER);
      else scheduler.schedule(WEBHOOKS_TIMER, at, null, opts);
      void scheduler.arm().catch(() => undefined);
    },
    waitUntil: (p) => ctx.waitUntil(p),
  });
  effects.adoptWebhook = (p) => webhooks.adopt(p);
  effects.onEvent = (e) => webhooks.emit(e);
  const c: Coordination = {
    store,
    effects,
    scheduler,
    clock,
    parked,
    gates,
    gateStore,
    disruption,
    budgetWatch,
    webhooks,
    webhookStore,
  };
  gates.onChange = (change) => gateChanged(c, change);
  return c;
}

/** A group's first closed gate changed: audited, and reported to the fleet's webhooks. */
function gateChanged(c: Coordination, { group, closed, was }: GateChange) {
  const fleetId = c.store.config?.fleet_id;
  const at = c.clock();
  if (closed) {
    emit(
      c.effects,
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
      c.effects,
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
  void c.effects.audit(
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
