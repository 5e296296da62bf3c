import { DurableObject } from "cloudflare:workers";
import { getDb } from "../db/client";
import type { NoticeInput } from "../notices/notices";
import type { Env } from "../env";
import type { HeldNames } from "../fleetlock/store";
import type { FleetPlanInputs } from "../planner/plan";
import { Outbox } from "../objects/kit/outbox";
import { fail, type Failure, type Result } from "../objects/kit/result";
import { Scheduler } from "../objects/kit/scheduler";
import { socketRoom } from "../objects/kit/sockets";
import type { ApplyOutcome, ApplyRolloutImage } from "../rollouts/ledger-side";
import { cancelDecommission, cleanupDelivered, decommission } from "./decommission";
import { ledgerEffects, project, type LedgerDeps, type LedgerOutbox } from "./effects";
import { openLedger } from "./open";
import * as operator from "./operator";
import { applyPlan, type PlanOutcome } from "./planning";
import { authorized, pollAnswer, type PollAnswer } from "./poll";
import type { ServerRecord } from "../model/server/record";
import { requestRefresh } from "./refresh";
import { LEFT_TIMER, QUIET_TIMER, QuietWatch } from "./quiet";
import { quietEventOf } from "../fleetlock/ledger-side";
import { acceptReport, pollHeartbeat, type ReportAnswer } from "./report";
import { applyRolloutImage } from "./rollout-marks";
import { PING, PONG } from "../model/server/channel-messages";
import { LedgerSockets } from "./sockets";
import type { AgentSpec, DesiredConfig, DesiredConfigInput, InventoryReport } from "../model/server/schemas";
import { LedgerStore } from "./store";
import { viewOf, type ServerView } from "./view";

/**
 * One per server: the authoritative desired config and last inventory report. Every write for a
 * server is serialized here; storage calls are synchronous, so each RPC's read-check-write runs
 * without interleaving and is durable before its reply leaves (output gate). Whatever the write
 * means for other bindings (the D1 index, the token row, the audit log, the fleet's coordinator)
 * is stored in the same turn in the outbox and delivered from there.
 *
 * This class is the surface only: each call hands over to a module that takes the store, the
 * outbox and the clock (./operator.ts, ./planning.ts, ./decommission.ts, ./refresh.ts,
 * ./report.ts, ./poll.ts, ./rollout-marks.ts, ./sockets.ts), then decides how long the caller waits for
 * delivery. Nothing waits in here: long polls wait in the Worker and hosts on hibernatable sockets.
 */
export class ServerLedger extends DurableObject<Env> {
  private readonly store: LedgerStore;
  private readonly scheduler: Scheduler;
  private readonly outbox: LedgerOutbox;
  private readonly sockets: LedgerSockets;
  private readonly deps: LedgerDeps;

  constructor(ctx: DurableObjectState, env: Env) {
    super(ctx, env);
    this.store = new LedgerStore(ctx.storage);
    this.scheduler = new Scheduler(ctx.storage);
    const db = () => getDb(this.env.DB);
    const quiet = new QuietWatch(this.scheduler, this.store);
    const leased = () => this.sockets.hostConnected() || quiet.watching();
    // One pending console notice per ledger (keyed): the newest stands for every change before it.
    const shown = (fleet: string, server: string) =>
      this.outbox.enqueue(
        "feed",
        { fleet, kind: "server", ids: [server], from: `server:${server}` } satisfies NoticeInput,
        { key: "feed" },
      );
    const effects = ledgerEffects({
      env: () => this.env,
      db,
      store: this.store,
      cleaned: (step) => cleanupDelivered(this.deps, step),
      leased,
      shown,
    });
    this.outbox = new Outbox(ctx.storage, this.scheduler, effects, db);
    this.deps = { store: this.store, outbox: this.outbox, clock: () => Date.now(), leased, quiet };
    this.sockets = new LedgerSockets(this.deps, socketRoom(ctx));
    this.store.onChange = () => this.sockets.changed();
    // Keep-alive pings on the host channel are answered by the runtime: they never wake the ledger.
    ctx.setWebSocketAutoResponse(new WebSocketRequestResponsePair(PING, PONG));
    // If opening throws (storage from newer code), the runtime resets the object and fails every
    // call; storage is untouched.
    ctx
      .blockConcurrencyWhile(async () => {
        openLedger(this.deps);
        this.sockets.restoreHeartbeat();
        await this.scheduler.arm();
      })
      .catch((err) => console.error("ledger storage upgrade failed:", err));
  }

  /**
   * After an operator's write: delivers what it enqueued before answering, so the index and the
   * coordinator already show it. A delivery that fails does not fail the write (it is committed);
   * the outbox retries it.
   */
  private async settle() {
    await this.scheduler.arm();
    await this.outbox.flush();
  }

  /** After a host's write: the answer does not wait for delivery (the alarm is the safety net). */
  private async settleInBackground() {
    await this.scheduler.arm();
    this.ctx.waitUntil(this.outbox.flush());
  }

  // ---- operator calls ----

  /** Its index row, token row, audit row and FleetLock identity leave through the outbox. */
  async register(
    record: ServerRecord,
    agents: Omit<AgentSpec, "instance_id">[],
    meta: { actor: string; details?: unknown; plan_rev?: number; deadline?: number },
  ): Promise<Result<{ view: ServerView }>> {
    const r = operator.register(this.deps, record, agents, meta);
    if (!r.ok) return r;
    await this.settle();
    return { ok: true, view: this.view()! };
  }

  /** The hostname and FleetLock identity this server holds, asked by its fleet's coordinator. */
  heldNames(): HeldNames | null {
    return operator.heldNames(this.deps);
  }

  async putDesired(
    input: DesiredConfigInput,
    actor: string,
  ): Promise<{ ok: true; created: boolean; config: DesiredConfig } | Failure> {
    const r = operator.putDesired(this.deps, input, actor);
    if (r.ok && r.created) await this.settle();
    return r;
  }

  async revokeToken(actor: string): Promise<boolean> {
    const found = operator.revokeToken(this.deps, actor);
    if (found) await this.settle();
    return found;
  }

  async setRebootIdentity(
    change: { fleetlock_id?: string | null; reboot_group?: string },
    meta: { actor: string; details?: unknown; deadline?: number },
  ): Promise<{ ok: true; view: ServerView; rev: number } | Failure> {
    const r = operator.setRebootIdentity(this.deps, change, meta);
    if (!r.ok) return r;
    await this.settle();
    return { ok: true, view: this.view()!, rev: r.rev };
  }

  /** PATCH labels: merged here; the index (and its label rows) follow through the outbox. */
  async setLabels(
    patch: Record<string, string | null>,
    meta: { actor: string },
  ): Promise<Result<{ view: ServerView }>> {
    const r = operator.setLabels(this.deps, patch, meta);
    if (!r.ok) return r;
    if (r.changed) await this.settle();
    return { ok: true, view: this.view()! };
  }

  async rotateToken(tokenHash: string, actor: string): Promise<Result<{ view: ServerView }>> {
    return this.answer(operator.rotateToken(this.deps, tokenHash, actor));
  }

  view(): ServerView | null {
    return viewOf(this.store, Date.now());
  }

  async applyPlan(
    inputs: FleetPlanInputs,
    meta: Parameters<typeof applyPlan>[2],
  ): Promise<Result<{ outcome: PlanOutcome; view: ServerView }>> {
    const r = applyPlan(this.deps, inputs, meta);
    if (!r.ok) return r;
    if (r.wrote) await this.settle();
    return { ok: true, outcome: r.outcome, view: this.view()! };
  }

  async decommission(opts: {
    actor: string;
    force?: { reason: string };
  }): Promise<Result<{ view: ServerView; changed: boolean }>> {
    const r = decommission(this.deps, opts);
    if (!r.ok) return r;
    // A forced removal's cleanup is delivered here too: the answer may show the server removed.
    if (r.changed) await this.settle();
    return { ok: true, view: this.view()!, changed: r.changed };
  }

  async cancelDecommission(actor: string): Promise<Result<{ view: ServerView }>> {
    return this.answer(cancelDecommission(this.deps, actor));
  }

  /** Asks the host to report again now: its next poll answers 200, and a parked poll wakes. */
  async requestRefresh(actor: string): Promise<Result<{ view: ServerView }>> {
    return this.answer(requestRefresh(this.deps, actor));
  }

  /** After an operator's write that answers with the view. */
  private async answer(r: Result): Promise<Result<{ view: ServerView }>> {
    if (!r.ok) return r;
    await this.settle();
    return { ok: true, view: this.view()! };
  }

  // ---- host calls ----

  /**
   * The host's poll, answered at once and never from D1. `known` is the generation from its
   * If-None-Match; `reportTag`, from its X-Report-Tag, makes the poll its heartbeat (./report.ts).
   * A long poll waits in the Worker, not here (./waits.ts).
   */
  async agentDesired(tokenHash: string, known: number | null, reportTag?: string): Promise<PollAnswer> {
    const beat = pollHeartbeat(this.deps, tokenHash, reportTag);
    if (!beat.ok) return beat;
    if (beat.enqueued) await this.settleInBackground();
    return pollAnswer(this.store, tokenHash, known);
  }

  async agentReport(tokenHash: string, report: InventoryReport): Promise<ReportAnswer> {
    const record = authorized(this.store, tokenHash);
    if (!record) return fail("unauthorized", "invalid server token");
    const { answer, enqueued } = acceptReport(this.deps, record, report);
    if (enqueued) await this.settleInBackground();
    return answer;
  }

  // ---- sockets (./sockets.ts): the host channel and the Worker's waiters, all hibernatable ----

  /** A WebSocket upgrade from the Worker; other answers are domain results as JSON. */
  async fetch(request: Request): Promise<Response> {
    const { response, enqueued } = this.sockets.open(request);
    if (enqueued) await this.settleInBackground();
    return response;
  }

  async webSocketMessage(ws: WebSocket, message: string | ArrayBuffer) {
    if (this.sockets.message(ws, message)) await this.settleInBackground();
  }

  /** The host's socket went: the index learns of it at once (its staleness is exact again). */
  async webSocketClose(ws: WebSocket) {
    if (this.sockets.closed(ws)) await this.settleInBackground();
  }

  async webSocketError(ws: WebSocket) {
    if (this.sockets.closed(ws)) await this.settleInBackground();
  }

  // ---- rollouts ----

  async applyRolloutImage(req: ApplyRolloutImage): Promise<ApplyOutcome | Failure> {
    const { outcome, wrote } = applyRolloutImage(this.deps, req);
    // Not delivered now: the host's report follows within moments and its delivery carries this
    // projection and audit row in the same D1 batch (one projection per target, not two). The
    // alarm delivers them within OUTBOX_SAFETY_MS should no report come.
    if (wrote) await this.scheduler.arm();
    return outcome;
  }

  async alarm() {
    let quiet = false;
    let stale = false;
    await this.scheduler.fire({
      outbox: () => this.outbox.flush(),
      // The HTTP host went quiet: the index gets its exact stale_at (./quiet.ts).
      [QUIET_TIMER]: () => {
        const now = Date.now();
        quiet = this.deps.quiet.fired(now);
        if (!quiet) return;
        project(this.outbox);
        // The server turned stale: its coordinator's fleet-health gates are told (after the index, same flush).
        const state = this.store.load();
        const health = state?.report ? quietEventOf(state.record, state.desired, state.report, now) : null;
        if (health) this.outbox.enqueue("server_health", health);
      },
      // The host that left the channel did not come back: stale now, in the index too (exact since it left).
      [LEFT_TIMER]: () => {
        const now = Date.now();
        if (!this.deps.quiet.leftFired(now, this.sockets.hostConnected())) return;
        const state = this.store.load()!;
        const health = quietEventOf(state.record, state.desired, state.report!, now);
        if (health) this.outbox.enqueue("server_health", health);
        stale = health !== null;
      },
    });
    // Delivered once the fired timer is gone, so the projection is no longer leased.
    if (quiet || stale) await this.outbox.flush();
  }
}
