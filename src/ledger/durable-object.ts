import { DurableObject } from "cloudflare:workers";
import type { Env } from "../env";
import { fixHoldAnnounced } from "../fleetlock/ledger-side";
import type { HeldNames } from "../fleetlock/store";
import type { FleetPlanInputs } from "../planner/plan";
import { fail, type Failure, type Result } from "../objects/kit/result";
import { answerClose } from "../objects/kit/sockets";
import type { ApplyOutcome, ApplyRolloutImage } from "../rollouts/ledger-side";
import { assemble } from "./assemble";
import { cancelDecommission, decommission } from "./decommission";
import { openLedger } from "./open";
import * as operator from "./operator";
import type { LedgerParts } from "./parts";
import { applyPlan, type PlanOutcome } from "./planning";
import { authorized, pollAnswer, type PollAnswer } from "./poll";
import type { ServerRecord } from "../model/server/record";
import { requestRefresh } from "./refresh";
import { acceptReport, pollHeartbeat, reportAcceptedText, reportOfText } from "./report";
import { applyRolloutImage, ROLLOUT_WRITE_DEFER_MS } from "./rollout-marks";
import { PING, PONG } from "../model/server/channel-messages";
import type { LedgerSockets } from "./sockets";
import type { AgentSpec, DesiredConfig, DesiredConfigInput, InventoryReport } from "../model/server/schemas";
import { fireTimers } from "./timers";
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
  /** Built once from the constructor's arguments (./assemble.ts). */
  private readonly parts: LedgerParts;
  private readonly sockets: LedgerSockets;

  constructor(ctx: DurableObjectState, env: Env) {
    super(ctx, env);
    ({ parts: this.parts, sockets: this.sockets } = assemble(
      ctx,
      () => this.env,
      () => Date.now(),
    ));
    // Keep-alive pings on the host channel are answered by the runtime: they never wake the ledger.
    ctx.setWebSocketAutoResponse(new WebSocketRequestResponsePair(PING, PONG));
    // If opening throws (storage from newer code), the runtime resets the object and fails every
    // call; storage is untouched.
    ctx
      .blockConcurrencyWhile(async () => {
        openLedger(this.parts);
        this.sockets.restoreHeartbeat();
        await this.parts.scheduler.arm();
      })
      .catch((err) => console.error("ledger storage upgrade failed:", err));
  }

  /**
   * After an operator's write: delivers what it enqueued before answering, so the index and the
   * coordinator already show it. A delivery that fails does not fail the write (it is committed);
   * the outbox retries it.
   */
  async #settle() {
    await this.parts.scheduler.arm();
    await this.#flush();
  }

  /** After a host's write: the answer does not wait for delivery (the alarm is the safety net). */
  async #settleInBackground() {
    await this.parts.scheduler.arm();
    this.ctx.waitUntil(this.#flush());
  }

  /**
   * A rollout's write arms the outbox's safety alarm for the projection and audit row it leaves to
   * the host's report (./rollout-marks.ts), which usually delivers them within moments. Once a
   * flush has, the alarm goes back to the ledger's next timer (the quiet watch's, minutes away)
   * rather than waking the ledger to find nothing due. In memory only: a ledger evicted meanwhile
   * is woken once, as before. Until then the alarm is held where the write set it
   * (`Scheduler.holdAlarm`): the report's effects, due in 10 s, do not bring it forward only for
   * the flush to take it back (a `setAlarm` row each way); the report's own flush delivers them,
   * or after a kill -9 the held alarm does, within ROLLOUT_WRITE_DEFER_MS of the write.
   */
  #safetyArmed = false;
  /**
   * The last report's text as the Worker sent it, and what it parsed to (agentReport). It spares
   * only a report sent again byte for byte: the reference agent stamps a new reconciled_at on
   * each, so its unchanged reports never match (acceptReport tells them from a change by content).
   */
  #lastReport: { text: string; parsed: { ok: true; report: InventoryReport } } | null = null;

  async #flush() {
    await this.parts.outbox.flush();
    if (!this.#safetyArmed) return;
    this.#safetyArmed = false;
    this.parts.outbox.forgetIdleTimer();
    await this.parts.scheduler.trim();
  }

  // ---- operator calls ----

  /** Its index row, token row, audit row and FleetLock identity leave through the outbox. */
  async register(
    record: ServerRecord,
    agents: Omit<AgentSpec, "instance_id">[],
    meta: { actor: string; details?: unknown; plan_rev?: number; deadline?: number },
  ): Promise<Result<{ view: ServerView }>> {
    const r = operator.register(this.parts, record, agents, meta);
    if (!r.ok) return r;
    await this.#settle();
    return { ok: true, view: this.view()! };
  }

  /** The hostname and FleetLock identity this server holds, asked by its fleet's coordinator. */
  heldNames(): HeldNames | null {
    return operator.heldNames(this.parts);
  }

  async putDesired(
    input: DesiredConfigInput,
    actor: string,
  ): Promise<{ ok: true; created: boolean; config: DesiredConfig } | Failure> {
    const r = operator.putDesired(this.parts, input, actor);
    if (r.ok && r.created) await this.#settle();
    return r;
  }

  /** The revocation's time as the ledger recorded it (null: by older code, no time kept); null with no server. */
  async revokeToken(actor: string): Promise<{ revoked_at: number | null } | null> {
    const revoked = operator.revokeToken(this.parts, actor);
    if (revoked) await this.#settle();
    return revoked;
  }

  async setRebootIdentity(
    change: { fleetlock_id?: string | null; reboot_group?: string },
    meta: { actor: string; details?: unknown; deadline?: number },
  ): Promise<{ ok: true; view: ServerView; rev: number } | Failure> {
    const r = operator.setRebootIdentity(this.parts, change, meta);
    if (!r.ok) return r;
    await this.#settle();
    return { ok: true, view: this.view()!, rev: r.rev };
  }

  /** PATCH labels: merged here; the index (and its label rows) follow through the outbox. */
  async setLabels(
    patch: Record<string, string | null>,
    meta: { actor: string },
  ): Promise<Result<{ view: ServerView }>> {
    const r = operator.setLabels(this.parts, patch, meta);
    if (!r.ok) return r;
    if (r.changed) await this.#settle();
    return { ok: true, view: this.view()! };
  }

  async rotateToken(tokenHash: string, actor: string, replaces: string): Promise<Result<{ view: ServerView }>> {
    return this.#answer(operator.rotateToken(this.parts, tokenHash, actor, replaces));
  }

  /** The current token's hash (null: no such server), which a rotation names as the one it replaces. */
  tokenHash(): string | null {
    return this.parts.store.load()?.record.token_hash ?? null;
  }

  view(): ServerView | null {
    return viewOf(this.parts.store, this.parts.clock());
  }

  /**
   * A drift fix's hold at its end (src/fleetlock/fix-budget.ts): the desired generation and
   * whether it is realized. Not yet realized, the hold stays for the realized report, so the
   * ledger sends it then (../fleetlock/ledger-side.ts).
   */
  fixHoldAsked(): { generation: number; realized: boolean } | null {
    const view = this.view();
    if (!view) return null;
    const realized = view.computed.status === "realized";
    if (!realized) fixHoldAnnounced(this.parts.store, view.desired.generation - 1);
    return { generation: view.desired.generation, realized };
  }

  async applyPlan(
    inputs: FleetPlanInputs,
    meta: Parameters<typeof applyPlan>[2],
  ): Promise<Result<{ outcome: PlanOutcome; view: ServerView }>> {
    const r = applyPlan(this.parts, inputs, meta);
    if (!r.ok) return r;
    if (r.wrote) await this.#settle();
    return { ok: true, outcome: r.outcome, view: this.view()! };
  }

  async decommission(opts: {
    actor: string;
    force?: { reason: string };
  }): Promise<Result<{ view: ServerView; changed: boolean }>> {
    const r = decommission(this.parts, opts);
    if (!r.ok) return r;
    // A forced removal's cleanup is delivered here too: the answer may show the server removed.
    if (r.changed) await this.#settle();
    return { ok: true, view: this.view()!, changed: r.changed };
  }

  async cancelDecommission(actor: string): Promise<Result<{ view: ServerView }>> {
    return this.#answer(cancelDecommission(this.parts, actor));
  }

  /** Asks the host to report again now: its next poll answers 200, and a parked poll wakes. */
  async requestRefresh(actor: string): Promise<Result<{ view: ServerView }>> {
    return this.#answer(requestRefresh(this.parts, actor));
  }

  /** After an operator's write that answers with the view. */
  async #answer(r: Result): Promise<Result<{ view: ServerView }>> {
    if (!r.ok) return r;
    await this.#settle();
    return { ok: true, view: this.view()! };
  }

  // ---- host calls ----

  /**
   * The host's poll, answered at once and never from D1. `known` is the generation from its
   * If-None-Match; `reportTag`, from its X-Report-Tag, makes the poll its heartbeat (./report.ts).
   * A long poll waits in the Worker, not here (./waits.ts).
   */
  async agentDesired(tokenHash: string, known: number | null, reportTag?: string): Promise<PollAnswer> {
    const beat = pollHeartbeat(this.parts, tokenHash, reportTag);
    if (!beat.ok) return beat;
    if (beat.enqueued) await this.#settleInBackground();
    return pollAnswer(this.parts.store, tokenHash, known);
  }

  /**
   * `report`: the InventoryReport the Worker validated, as JSON text, and the answer is the
   * ReportAccepted body as JSON text: over the object call a string is one copy of its bytes,
   * where a structured clone walks every nested object (twice, with the answer's re-serialization
   * in the Worker) — the largest piece of an unchanged report's JavaScript after the runtime's own.
   * The text is checked again here (reportOfText): what does not parse is refused, not thrown.
   * The same text as the last report (a heartbeat: most reports) is not parsed and checked again:
   * what it parses to is a pure function of it, remembered in memory only.
   */
  async agentReport(tokenHash: string, report: string): Promise<{ ok: true; accepted: string } | Failure> {
    const record = authorized(this.parts.store, tokenHash);
    if (!record) return fail("unauthorized", "invalid server token");
    const last = this.#lastReport;
    const parsed = last?.text === report ? last.parsed : reportOfText(report);
    if (!parsed.ok) return parsed;
    this.#lastReport = { text: report, parsed };
    const { answer, enqueued } = acceptReport(this.parts, record, parsed.report);
    if (enqueued) await this.#settleInBackground();
    return answer.ok ? { ok: true, accepted: reportAcceptedText(record.id, answer) } : answer;
  }

  // ---- sockets (./sockets.ts): the host channel and the Worker's waiters, all hibernatable ----

  /** A WebSocket upgrade from the Worker; other answers are domain results as JSON. */
  async fetch(request: Request): Promise<Response> {
    const { response, enqueued, trim } = this.sockets.open(request);
    if (trim) await this.parts.scheduler.trim();
    if (enqueued) await this.#settleInBackground();
    return response;
  }

  async webSocketMessage(ws: WebSocket, message: string | ArrayBuffer) {
    if (this.sockets.message(ws, message)) await this.#settleInBackground();
  }

  /**
   * The host's socket went: the index learns of it at once (its staleness is exact again). The
   * peer's close is answered here: a hibernatable socket's runtime sends no reply of its own (the
   * auto-reply of compatibility dates from 2026-04-07 covers accepted sockets only), and without
   * one the connection stays open, the client in CLOSING, holding a file per reconnecting host.
   */
  async webSocketClose(ws: WebSocket, code: number, reason: string) {
    answerClose(ws, code, reason);
    if (this.sockets.closed(ws)) await this.#settleInBackground();
  }

  async webSocketError(ws: WebSocket) {
    answerClose(ws, 1011, "");
    if (this.sockets.closed(ws)) await this.#settleInBackground();
  }

  // ---- rollouts ----

  async applyRolloutImage(req: ApplyRolloutImage): Promise<ApplyOutcome | Failure> {
    const { outcome, wrote } = applyRolloutImage(this.parts, req);
    // Not delivered now: the host's report follows within moments and its delivery carries this
    // projection and audit row in the same D1 batch (one projection per target, not two). The
    // alarm delivers them should no report come; the report's flush takes that alarm back.
    if (wrote) {
      this.#safetyArmed = true;
      await this.parts.scheduler.arm();
      this.parts.scheduler.holdAlarm(this.parts.scheduler.now() + ROLLOUT_WRITE_DEFER_MS);
    }
    return outcome;
  }

  /** Dispatches every due timer to its handler (./timers.ts). */
  async alarm() {
    await fireTimers(this.parts);
  }
}
