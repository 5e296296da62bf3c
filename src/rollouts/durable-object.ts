import { DurableObject } from "cloudflare:workers";
import type { Env } from "../env";
import type { Failure } from "../objects/kit/result";
import type { SocketRoom } from "../objects/kit/sockets";
import { assemble } from "./assemble";
import type { RolloutEvent } from "./ledger-side";
import type { Control, RolloutSpec, RolloutState, TargetState } from "./machine";
import { control, endTarget, redrive, start, type TargetInput } from "./operator";
import { targetEvent } from "./outcomes";
import type { RolloutParts } from "./parts";
import { budgetChanged, budgetFreed } from "./starting";
import type { Plan } from "./strategy";
import { fireTimers } from "./timers";
import { eventsPage, summary, summaryIfAny, targetsPage, type RolloutSummary } from "./views";
import { openSummaryWait, SUMMARY_WAIT_PATH } from "./waits";

/**
 * One per rollout: its targets and their states (SQL in its own storage), its counters, its
 * timers (the targets' deadlines, slow-server checks, slot retries) on one alarm. It writes each
 * target's next generation through the target's ledger and learns outcomes from the ledgers'
 * outboxes; everything it means for D1 (rollout and target rows, audit, the (fleet, agent) lock)
 * and for the coordinator (reboot slots) leaves through its own outbox. Transitions are the pure
 * functions of machine.ts, each applied in one synchronous storage turn; this class only hands
 * each call to the module that decides it. Its long poll waits in the Worker (./waits.ts).
 */
export class Rollout extends DurableObject<Env> {
  /** Built once from the constructor's arguments (./assemble.ts). */
  private readonly parts: RolloutParts;
  private readonly room: SocketRoom;

  constructor(ctx: DurableObjectState, env: Env) {
    super(ctx, env);
    ({ parts: this.parts, room: this.room } = assemble(
      ctx,
      () => this.env,
      () => Date.now(),
    ));
  }

  // ---- RPC: start, operator controls, reads ----

  /** Creates the rollout and starts its first targets; a repeated call changes nothing. */
  start(spec: RolloutSpec, targets: TargetInput[], plan: Plan | null = null): Promise<RolloutSummary> {
    return start(this.parts, spec, targets, plan);
  }

  /** pause | resume | cancel | rollback, audited with the operator's name. */
  control(action: Control, actor: string): Promise<{ ok: true; summary: RolloutSummary } | Failure> {
    return control(this.parts, action, actor);
  }

  /** An operator ends one stuck target (by server id or hostname), audited with their name. */
  endTarget(server: string, actor: string, reason?: string) {
    return endTarget(this.parts, server, actor, reason);
  }

  /** The summary now; null when no rollout was started here. */
  get(): RolloutSummary | null {
    return summaryIfAny(this.parts);
  }

  /** A long poll's waiter, upgraded by the Worker (./waits.ts): answered at once, or a hibernatable waiter. */
  async fetch(request: Request): Promise<Response> {
    if (new URL(request.url).pathname !== SUMMARY_WAIT_PATH) return new Response(null, { status: 404 });
    return openSummaryWait(this.parts, this.room, request);
  }

  /** Waiters never speak; a closed one needs nothing. */
  async webSocketMessage() {}

  async webSocketClose() {}

  async targets(opts: { pass?: number; state?: TargetState; after: number; limit: number }) {
    return targetsPage(this.parts, opts);
  }

  async events(opts: { after: number; limit: number }) {
    return eventsPage(this.parts, opts);
  }

  summary(): RolloutSummary {
    return summary(this.parts);
  }

  // ---- RPC from ledgers (through their outboxes) and the cron ----

  /** A target's outcome; duplicates and reordered or late events are answered `changed: false`. */
  targetEvent(e: RolloutEvent): Promise<{ ok: true; changed: boolean }> {
    return targetEvent(this.parts, e);
  }

  /** The fleet's coordinator: the disruption budget freed, targets waiting for it ask again. */
  async budgetFreed(): Promise<{ ok: true; requeued: number }> {
    return budgetFreed(this.parts);
  }

  /** The fleet's disruption budget was set (`on`) or removed: later targets ask for a unit, or stop asking. */
  async budgetChanged(on: boolean): Promise<{ ok: true; changed: boolean }> {
    return budgetChanged(this.parts, on);
  }

  /** Cron backstop: re-arms what may have been lost (timers, deliveries) and starts what may start. */
  redrive(): Promise<{ ok: true; state: RolloutState | null }> {
    return redrive(this.parts);
  }

  // ---- timers ----

  /** Dispatches every due timer to its handler (./timers.ts). */
  async alarm() {
    await fireTimers(this.parts);
  }
}
