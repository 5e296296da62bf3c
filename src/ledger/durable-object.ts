import { DurableObject } from "cloudflare:workers";
import { auditEvent, type AuditEntry } from "../audit/log";
import { getDb } from "../db/client";
import type { Env } from "../env";
import { digestsEqual } from "../lib/crypto";
import { Outbox, type Effect } from "../objects/kit/outbox";
import { fail, type Failure, type Result } from "../objects/kit/result";
import { Scheduler } from "../objects/kit/scheduler";
import { applyDesired, type DesiredState } from "./desired";
import { identityPayload, ledgerEffects, tokenPayload, type LedgerEffectKind, type ReleasePayload } from "./effects";
import { buildProjection, lastSeenRefreshMs, projectionStatements, type Signatures } from "./projection";
import type { ServerRecord } from "./record";
import type { AgentSpec, DesiredConfig, DesiredConfigInput, InventoryReport, StoredReport } from "./schemas";
import { computeStatus, type ComputedStatus } from "./status";
import { upgradeLedgerStorage } from "./storage-format";
import type { FleetPlanInputs } from "../intent/store";
import { INITIAL_PLAN_STATE, planStep, type PlanState } from "../planner/ledger-side";
import {
  acknowledges,
  cancelledDesired,
  CLEANUP_STEPS,
  decommissionOrder,
  lifecycleDesired,
  type CleanupStep,
  type LifecycleState,
} from "./lifecycle";
import { and, eq, isNull } from "drizzle-orm";
import { agentInstances, tokens } from "../db/schema";
import { viewTag } from "./view-tag";
import { decideApply, settleMarks, type ApplyOutcome, type ApplyRolloutImage, type RolloutEvent, type RolloutMark } from "../rollouts/ledger-side";
import { coordinatorOf } from "../objects/stubs";

const KEY = {
  record: "record",
  desired: "desired",
  report: "report",
  projected: "projected",
  /** Revision of the FleetLock identity (fleetlock_id, reboot_group); registration is 0. */
  rebootRev: "reboot_rev",
  /** Written by the previous release's hook when the coordinator missed a release; moved to the outbox on load. */
  legacyPendingRelease: "fleetlock_release_pending",
  /** Planned or pinned, and the newest fleet intent revision offered (issue 8, ./planning.ts). */
  plan: "plan",
  /** The decommission under way, and its cleanup progress (issue 8, ./lifecycle.ts). */
  lifecycle: "lifecycle",
  /** The operator's request that the host report again now (issue 8). */
  refresh: "refresh",
} as const;

/** A refresh is pending from `requested_at` until the first report after it (`answered_at`). */
export interface RefreshState {
  requested_at: number;
  requested_by: string;
  answered_at: number | null;
}

const CLEANUP_TIMER = "cleanup";
/** Rollouts (issue 9): per agent, the generation a rollout wrote and has not yet heard settled. */
const KEY_ROLLOUT_MARKS = "rollout_marks";

/** What the index shows of this server, as last written by the projection. */
interface ProjectedMark {
  written?: Signatures | null;
  last_seen_written: number | null;
  /** Marks of the previous release: a dirty one cannot say what D1 holds. */
  dirty?: boolean;
}

export interface ServerView {
  record: Omit<ServerRecord, "token_hash" | "token_id">;
  plan: PlanState;
  lifecycle: LifecycleState | null;
  refresh: RefreshState | null;
  desired: DesiredConfig;
  report: StoredReport | null;
  computed: ComputedStatus;
}

/** How old the persisted heartbeat of an unchanged report may get (memory holds the latest). */
export const HEARTBEAT_PERSIST_MS = 60_000;

interface LedgerState {
  record: ServerRecord;
  desired: DesiredState;
  report: StoredReport | undefined;
  /** Identity of the report's content, heartbeat fields excluded. */
  reportKey: string | undefined;
  /** The in-memory report is newer than the stored one only by its heartbeat. */
  heartbeatOnly?: boolean;
  /** received_at of the report as stored. */
  persistedAt?: number;
}

/** Everything a report says except when it was said. */
function contentKey(r: StoredReport) {
  return JSON.stringify([r.generation, r.boot_id, r.agents, r.errors, r.assignments]);
}

/**
 * One per server: the authoritative desired config and last inventory report. Every write for a
 * server is serialized here; storage calls are synchronous, so each RPC's read-check-write runs
 * without interleaving and is durable before its reply leaves (output gate). Whatever the write
 * means for other bindings (the D1 index, the token row, the audit log, the fleet's coordinator)
 * is stored in the same turn in the outbox and delivered from there.
 */
export class ServerLedger extends DurableObject<Env> {
  private waiters = new Set<() => void>();
  private readonly scheduler: Scheduler;
  private readonly outbox: Outbox<LedgerEffectKind>;
  /** The mark the delivery under way will have made true, recorded once D1 took it. */
  private inFlight: ProjectedMark | null = null;

  constructor(ctx: DurableObjectState, env: Env) {
    super(ctx, env);
    this.scheduler = new Scheduler(ctx.storage);
    this.outbox = new Outbox(ctx.storage, this.scheduler, ledgerEffects(() => this.env, () => this.db(), this.projectEffect()), () => this.db());
    // Storage written by older code is brought to this code's format before any call reads it.
    // If it throws, the runtime resets the object and fails every call; storage is untouched.
    ctx
      .blockConcurrencyWhile(async () => {
        const upgraded = upgradeLedgerStorage(ctx.storage);
        const legacy = this.kv.get<Omit<ReleasePayload, "server_id"> & { fleet_id: string }>(KEY.legacyPendingRelease);
        const record = this.kv.get<ServerRecord>(KEY.record);
        if (legacy && record) {
          this.outbox.enqueue("release", { ...legacy, server_id: record.id } satisfies ReleasePayload, { key: "release" });
          this.kv.delete(KEY.legacyPendingRelease);
        }
        // The index learns of what the upgrade changed through the projection.
        if (upgraded?.changed) this.outbox.enqueue("project", {}, { key: "project" });
        await this.scheduler.arm();
      })
      .catch((err) => console.error("ledger storage upgrade failed:", err));
  }

  private get kv() {
    return this.ctx.storage.kv;
  }

  private db() {
    return getDb(this.env.DB);
  }

  /**
   * Write-through copy of the three state keys: every write goes to storage and here together
   * (always through `save`), so the hot path (polls, reports) skips deserializing from storage.
   */
  private cache?: LedgerState | null;

  private load(): LedgerState | null {
    if (this.cache === undefined) {
      const record = this.kv.get<ServerRecord>(KEY.record);
      const desired = this.kv.get<DesiredState>(KEY.desired);
      const report = this.kv.get<StoredReport>(KEY.report);
      this.cache =
        record && desired
          ? { record, desired, report, reportKey: report && contentKey(report), persistedAt: report?.received_at }
          : null;
    }
    return this.cache;
  }

  private save(patch: Partial<Pick<LedgerState, "record" | "desired" | "report">>) {
    if (patch.record) this.kv.put(KEY.record, patch.record);
    if (patch.desired) this.kv.put(KEY.desired, patch.desired);
    if (patch.report) this.kv.put(KEY.report, patch.report);
    this.cache = { ...(this.cache ?? ({} as LedgerState)), ...patch };
    if (patch.report) {
      this.cache.reportKey = contentKey(patch.report);
      this.cache.persistedAt = patch.report.received_at;
      this.cache.heartbeatOnly = false;
    }
    this.wakeViewWaiters();
  }

  /** Planning, lifecycle and refresh state: shown in the view, so operators waiting on it wake. */
  private putMeta(key: typeof KEY.plan | typeof KEY.lifecycle | typeof KEY.refresh, value: unknown) {
    this.kv.put(key, value);
    this.wakeViewWaiters();
  }

  private configOf(record: ServerRecord, desired: DesiredState): DesiredConfig {
    return {
      server_id: record.id,
      generation: desired.generation,
      agents: desired.agents,
      lifecycle: desired.lifecycle,
    };
  }

  private authorized(tokenHash: string) {
    const record = this.load()?.record;
    return record && record.state !== "removed" && record.token_hash !== "" && digestsEqual(record.token_hash, tokenHash)
      ? record
      : null;
  }

  private audit(entry: AuditEntry) {
    this.outbox.enqueue("audit", auditEvent(entry));
  }

  private wakeWaiters() {
    for (const wake of this.waiters) wake();
    this.waiters.clear();
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

  /**
   * Creates the ledger with generation 1; a repeated call for the same server changes nothing.
   * Its index row, token row, audit row and FleetLock identity leave through the outbox.
   */
  async register(
    record: ServerRecord,
    agents: Omit<AgentSpec, "instance_id">[],
    meta: { actor: string; details?: unknown; plan_rev?: number },
  ): Promise<ServerView> {
    if (!this.load()) {
      const desired: DesiredState = {
        generation: 1,
        agents: agents.map((a) => ({ ...a, instance_id: crypto.randomUUID() })),
        lifecycle: "run",
        updated_at: record.created_at,
      };
      this.ctx.storage.transactionSync(() => {
        this.save({ record, desired });
        this.putMeta(KEY.plan, { mode: "planned", rev: meta.plan_rev ?? 0 } satisfies PlanState);
        this.outbox.enqueue("project", {}, { key: "project" });
        this.outbox.enqueue("token", tokenPayload(record, meta.actor, null), { key: "token" });
        if (record.fleetlock_id) this.outbox.enqueue("identity", identityPayload(record, 0), { key: "identity" });
        this.audit({ actor: meta.actor, action: "server.register", target: `server:${record.id}`, details: meta.details });
      });
    }
    await this.settle();
    return this.view()!;
  }

  async putDesired(
    input: DesiredConfigInput,
    actor: string,
  ): Promise<{ ok: true; created: boolean; config: DesiredConfig } | Failure> {
    const state = this.load();
    if (!state) return fail("not_found", "server does not exist");
    if (state.record.state === "removed") return fail("server_removed", "a removed server cannot be changed");
    const outcome = applyDesired(state.desired, input, Date.now());
    switch (outcome.kind) {
      case "stale_generation":
        return fail(
          "stale_generation",
          `generation ${input.generation} is older than the current generation ${outcome.current.generation}`,
          { current_generation: outcome.current.generation },
        );
      case "generation_conflict":
        return fail("generation_conflict", `generation ${input.generation} already holds a different config`, {
          current_generation: outcome.current.generation,
        });
      case "unchanged":
        return { ok: true, created: false, config: this.configOf(state.record, outcome.current) };
      case "accepted": {
        // Lifecycle orders come only from decommissioning (issue 8), never from a desired PUT.
        if (outcome.next.lifecycle !== state.desired.lifecycle || state.record.state === "decommissioning") {
          return fail(
            "lifecycle_change_refused",
            `lifecycle is '${state.desired.lifecycle}'; only decommissioning (or cancelling it) changes it`,
            { lifecycle: state.desired.lifecycle },
          );
        }
        const config = this.configOf(state.record, outcome.next);
        this.ctx.storage.transactionSync(() => {
          this.save({ desired: outcome.next });
          // An explicit config pins the server: the planner leaves it alone until released.
          this.putMeta(KEY.plan, { ...this.planState(), mode: "pinned", pinned_at: Date.now(), pinned_by: actor } satisfies PlanState);
          this.outbox.enqueue("project", {}, { key: "project" });
          this.audit({
            actor,
            action: "server.desired.put",
            target: `server:${state.record.id}`,
            details: { generation: config.generation, lifecycle: config.lifecycle, agents: config.agents.length },
          });
        });
        this.wakeWaiters();
        await this.settle();
        return { ok: true, created: true, config };
      }
    }
  }

  /** The host's token stops working at once (a parked poll included); its D1 row follows. */
  async revokeToken(actor: string): Promise<boolean> {
    const record = this.load()?.record;
    if (!record) return false;
    if (record.token_hash !== "") {
      const now = Date.now();
      this.ctx.storage.transactionSync(() => {
        this.save({ record: { ...record, token_hash: "" } });
        this.outbox.enqueue("token", tokenPayload(record, actor, now), { key: "token" });
        this.audit({ actor, action: "token.revoke", target: `token:${record.token_id}` });
      });
      this.wakeWaiters();
    }
    await this.settle();
    return true;
  }

  /**
   * Changes the server's FleetLock identity (PATCH /v1/servers/{id}). Each change gets the next
   * revision, so the coordinator ignores a delivery that arrives after a newer one.
   */
  async setRebootIdentity(
    change: { fleetlock_id?: string | null; reboot_group?: string },
    meta: { actor: string; details?: unknown },
  ): Promise<{ ok: true; view: ServerView; rev: number } | Failure> {
    const record = this.load()?.record;
    if (!record) return fail("not_found", "server does not exist");
    if (record.state === "removed") return fail("server_removed", "a removed server cannot be changed");
    const next: ServerRecord = {
      ...record,
      fleetlock_id: change.fleetlock_id === undefined ? record.fleetlock_id : change.fleetlock_id,
      reboot_group: change.reboot_group ?? record.reboot_group,
    };
    const rev = (this.kv.get<number>(KEY.rebootRev) ?? 0) + 1;
    this.ctx.storage.transactionSync(() => {
      this.save({ record: next });
      this.kv.put(KEY.rebootRev, rev);
      this.outbox.enqueue("identity", identityPayload(next, rev), { key: "identity" });
      this.outbox.enqueue("project", {}, { key: "project" });
      this.audit({ actor: meta.actor, action: "server.patch", target: `server:${record.id}`, details: meta.details });
    });
    await this.settle();
    return { ok: true, view: this.view()!, rev };
  }

  view(): ServerView | null {
    const state = this.load();
    if (!state) return null;
    const { token_hash: _h, token_id: _t, ...record } = state.record;
    return {
      record,
      plan: this.planState(),
      lifecycle: this.kv.get<LifecycleState>(KEY.lifecycle) ?? null,
      refresh: this.refreshState(),
      desired: this.configOf(state.record, state.desired),
      report: state.report ?? null,
      computed: computeStatus(state.desired, state.report, Date.now(), state.record.stale_after_s * 1000),
    };
  }

  private planState(): PlanState {
    return this.kv.get<PlanState>(KEY.plan) ?? INITIAL_PLAN_STATE;
  }

  /**
   * The planner's write (issue 8): the fleet's plan inputs as of intent revision `inputs.rev`. A
   * new generation is issued only when the plan differs from the current agents and the server is
   * planned (not pinned); older inputs than the newest seen change nothing. With `release`, a
   * pinned server goes back to planning first.
   */
  async applyPlan(
    inputs: FleetPlanInputs,
    meta: { actor: string; reason: string; release?: boolean; reissue?: boolean; roles?: string[] },
  ): Promise<Result<{ outcome: "issued" | "reissued" | "unchanged" | "pinned" | "older_inputs" | "not_running"; view: ServerView }>> {
    const state = this.load();
    if (!state) return fail("not_found", "server does not exist");
    if (state.record.state === "removed") return fail("server_removed", "a removed server is not planned");
    const before = this.planState();
    const current: PlanState = meta.release ? { mode: "planned", rev: before.rev } : before;
    // New roles (PATCH): recorded whatever the plan does, then planned from.
    const rolesChanged = meta.roles !== undefined && JSON.stringify(meta.roles) !== JSON.stringify(state.record.roles);
    const record = rolesChanged ? { ...state.record, roles: meta.roles! } : state.record;
    const step = planStep(record, state.desired, current, inputs, Date.now(), { force: meta.release || rolesChanged });
    if (rolesChanged) {
      this.ctx.storage.transactionSync(() => {
        this.save({ record });
        this.outbox.enqueue("project", {}, { key: "project" });
        this.audit({
          actor: meta.actor,
          action: "server.roles",
          target: `server:${record.id}`,
          details: { before: state.record.roles, after: record.roles },
        });
      });
      state.record = record;
    }
    if (step.kind === "skipped") {
      if (rolesChanged) await this.settle();
      return { ok: true, outcome: step.why, view: this.view()! };
    }
    // A drift fix re-issues the config (same agents, next generation) when the plan is unchanged,
    // so the host reconciles again.
    const reissue =
      step.kind === "recorded" && meta.reissue
        ? { ...state.desired, generation: state.desired.generation + 1, updated_at: Date.now() }
        : null;
    this.ctx.storage.transactionSync(() => {
      const recordChanged = step.record !== state.record;
      if (recordChanged) this.save({ record: step.record });
      this.putMeta(KEY.plan, step.planState);
      if (meta.release && before.mode === "pinned") {
        this.audit({ actor: meta.actor, action: "server.desired.release", target: `server:${state.record.id}`, details: { rev: inputs.rev } });
      }
      if (step.kind === "issue") {
        this.save({ desired: step.next });
        this.audit({
          actor: meta.actor,
          action: "server.plan",
          target: `server:${state.record.id}`,
          details: {
            reason: meta.reason,
            rev: inputs.rev,
            generation: step.next.generation,
            agents: step.next.agents.map((a) => `${a.name}=${a.image}`),
            unknown_roles: step.plan.unknown_roles,
            unplannable: step.plan.unplannable,
          },
        });
      }
      if (reissue) {
        this.save({ desired: reissue });
        this.audit({
          actor: meta.actor,
          action: "server.reissue",
          target: `server:${state.record.id}`,
          details: { reason: meta.reason, generation: reissue.generation },
        });
      }
      if (recordChanged || step.kind === "issue" || reissue) this.outbox.enqueue("project", {}, { key: "project" });
    });
    if (step.kind === "issue" || reissue) this.wakeWaiters();
    await this.settle();
    const outcome = step.kind === "issue" ? "issued" : reissue ? "reissued" : step.why;
    return { ok: true, outcome, view: this.view()! };
  }

  // ---- lifecycle (issue 8) ----

  /**
   * Decommission: the order goes out in the next generation (terminate for managed servers,
   * uninstall for manual ones only when their last report shows nothing assigned or attached).
   * With `force` (a dead host), cleanup starts at once without the host's acknowledgement.
   * Repeating it changes nothing.
   */
  async decommission(opts: { actor: string; force?: { reason: string } }): Promise<Result<{ view: ServerView; changed: boolean }>> {
    const state = this.load();
    if (!state) return fail("not_found", "server does not exist");
    const { record, desired, report } = state;
    if (record.state === "removed") {
      return opts.force ? { ok: true, view: this.view()!, changed: false } : fail("server_removed", "the server is removed");
    }
    const now = Date.now();
    let lc = this.kv.get<LifecycleState>(KEY.lifecycle);
    if (opts.force) {
      if (lc?.cleanup_from !== undefined) return { ok: true, view: this.view()!, changed: false };
      const forced: LifecycleState = {
        ...(lc ?? {
          order: record.kind === "managed" ? "terminate" : "uninstall",
          generation: desired.generation,
          requested_at: now,
          requested_by: opts.actor,
          previous_agents: desired.agents,
          previous_state: record.state,
          done: [],
        }),
        forced: { by: opts.actor, reason: opts.force.reason },
      };
      this.ctx.storage.transactionSync(() => {
        this.save({ record: { ...record, state: "decommissioning" } });
        this.leaveRollouts(now);
        this.beginCleanup(this.load()!.record, forced, now);
        this.audit({
          actor: opts.actor,
          action: "server.decommission.force",
          target: `server:${record.id}`,
          details: { reason: opts.force!.reason },
        });
      });
      this.wakeWaiters();
      await this.settle();
      this.ctx.waitUntil(this.runCleanup().catch(() => {}));
      return { ok: true, view: this.view()!, changed: true };
    }
    if (lc) return { ok: true, view: this.view()!, changed: false };
    const decision = decommissionOrder(record, report);
    if (decision.kind === "blocked") {
      return fail("uninstall_blocked", `cannot order uninstall of manual server ${record.hostname}: ${decision.why}`, {
        units: decision.units,
        storage: decision.storage,
      });
    }
    const next = lifecycleDesired(desired, decision.order, now);
    lc = {
      order: decision.order,
      generation: next.generation,
      requested_at: now,
      requested_by: opts.actor,
      previous_agents: desired.agents,
      previous_state: record.state,
      done: [],
    };
    this.ctx.storage.transactionSync(() => {
      this.save({ record: { ...record, state: "decommissioning" }, desired: next });
      this.putMeta(KEY.lifecycle, lc);
      this.leaveRollouts(now);
      this.outbox.enqueue("project", {}, { key: "project" });
      this.audit({
        actor: opts.actor,
        action: "server.decommission",
        target: `server:${record.id}`,
        details: { order: decision.order, generation: next.generation },
      });
    });
    this.wakeWaiters();
    await this.settle();
    return { ok: true, view: this.view()!, changed: true };
  }

  /** Cancels a decommission the host has not acknowledged: the next generation orders `run` again. */
  async cancelDecommission(actor: string): Promise<Result<{ view: ServerView }>> {
    const state = this.load();
    if (!state) return fail("not_found", "server does not exist");
    if (state.record.state === "removed") return fail("server_removed", "the server is removed");
    const lc = this.kv.get<LifecycleState>(KEY.lifecycle);
    if (!lc || state.record.state !== "decommissioning") return fail("not_decommissioning", "the server is not being decommissioned");
    if (lc.cleanup_from !== undefined) {
      return fail("decommission_acknowledged", "the host acknowledged (or removal was forced); cleanup is under way and cannot be cancelled");
    }
    const next = cancelledDesired(state.desired, lc, Date.now());
    this.ctx.storage.transactionSync(() => {
      this.save({ record: { ...state.record, state: lc.previous_state }, desired: next });
      this.kv.delete(KEY.lifecycle);
      this.outbox.enqueue("project", {}, { key: "project" });
      this.audit({ actor, action: "server.decommission.cancel", target: `server:${state.record.id}`, details: { generation: next.generation } });
    });
    this.wakeWaiters();
    await this.settle();
    return { ok: true, view: this.view()! };
  }

  /** In a report's transaction: the host's acknowledgement starts cleanup. */
  private acknowledgeLifecycle(record: ServerRecord, report: StoredReport, now: number) {
    const lc = this.kv.get<LifecycleState>(KEY.lifecycle);
    if (!lc || lc.cleanup_from !== undefined || !acknowledges(lc, report)) return false;
    this.beginCleanup(record, lc, now);
    this.audit({
      actor: `server:${record.id}`,
      action: "server.decommission.acknowledged",
      target: `server:${record.id}`,
      details: { order: lc.order, generation: lc.generation },
    });
    return true;
  }

  /** Inside a transaction: the token stops at once; the remaining steps run from the cleanup timer. */
  private beginCleanup(record: ServerRecord, lc: LifecycleState, now: number) {
    this.save({ record: { ...record, token_hash: "" } });
    // Replaces any token row still queued (a rotation), so none can land after the revocation.
    this.outbox.enqueue("token", tokenPayload({ ...record, token_hash: "" }, lc.forced?.by ?? lc.requested_by, now), { key: "token" });
    this.putMeta(KEY.lifecycle, { ...lc, cleanup_from: now } satisfies LifecycleState);
    // The FleetLock identity goes with the next revision, so no older delivery can bring it back.
    this.kv.put(KEY.rebootRev, (this.kv.get<number>(KEY.rebootRev) ?? 0) + 1);
    this.scheduler.schedule(CLEANUP_TIMER, now);
  }

  private cleaning: Promise<void> = Promise.resolve();

  /** Runs the cleanup steps not done yet, in order; each is idempotent and retried by the timer. */
  private runCleanup(): Promise<void> {
    const run = this.cleaning.then(() => this.cleanupOnce());
    this.cleaning = run.catch(() => {});
    return run;
  }

  private async cleanupOnce() {
    const state = this.load();
    let lc = this.kv.get<LifecycleState>(KEY.lifecycle);
    if (!state || !lc || lc.cleanup_from === undefined || state.record.state === "removed") return;
    for (const step of CLEANUP_STEPS) {
      if (lc.done.includes(step)) continue;
      await this.cleanupStep(step, state.record);
      lc = { ...lc, done: [...lc.done, step] };
      this.putMeta(KEY.lifecycle, lc);
    }
    const done = lc;
    this.ctx.storage.transactionSync(() => {
      this.save({ record: { ...this.load()!.record, state: "removed" } });
      this.scheduler.cancel(CLEANUP_TIMER);
      this.outbox.enqueue("project", {}, { key: "project" });
      this.audit({
        actor: done.forced ? done.forced.by : `server:${state.record.id}`,
        action: "server.removed",
        target: `server:${state.record.id}`,
        details: { order: done.order, forced: done.forced ?? null, steps: done.done },
      });
    });
    this.wakeWaiters();
    await this.settle();
  }

  private async cleanupStep(step: CleanupStep, record: ServerRecord) {
    switch (step) {
      case "index": {
        // Its instances leave the index and its token row is revoked, in one batch.
        const db = this.db();
        const now = Date.now();
        await db.batch([
          db.delete(agentInstances).where(eq(agentInstances.serverId, record.id)),
          db.update(tokens).set({ revokedAt: now, hash: "revoked" }).where(and(eq(tokens.id, record.token_id), isNull(tokens.revokedAt))),
        ]);
        return;
      }
      case "coordinator": {
        // It leaves every reboot semaphore and frees its fleetlock_id.
        const coordinator = coordinatorOf(this.env, record.fleet_id);
        await coordinator.releaseServer(record.id, { reason: "server removed", actor: `server:${record.id}` });
        await coordinator.setServerIdentity(record.id, {
          fleetlock_id: null,
          hostname: record.hostname,
          reboot_group: record.reboot_group,
          rev: this.kv.get<number>(KEY.rebootRev) ?? 1,
        });
        return;
      }
    }
  }

  /** A new server token; the old one stops at once (a parked poll included). */
  async rotateToken(tokenHash: string, actor: string): Promise<Result<{ view: ServerView }>> {
    const state = this.load();
    if (!state) return fail("not_found", "server does not exist");
    if (state.record.state === "removed" || this.kv.get<LifecycleState>(KEY.lifecycle)?.cleanup_from !== undefined) {
      return fail("server_removed", "the server is removed (or being removed); its token cannot be renewed");
    }
    const next = { ...state.record, token_hash: tokenHash };
    this.ctx.storage.transactionSync(() => {
      this.save({ record: next });
      this.outbox.enqueue("token", tokenPayload(next, actor, null), { key: "token" });
      this.audit({ actor, action: "server.token.rotate", target: `server:${next.id}` });
    });
    this.wakeWaiters();
    await this.settle();
    return { ok: true, view: this.view()! };
  }

  // ---- operators waiting on the view (GET /v1/servers/{id}?wait=S) ----

  private viewWaiters = new Set<() => void>();

  private wakeViewWaiters() {
    for (const wake of this.viewWaiters) wake();
    this.viewWaiters.clear();
  }

  /**
   * Answers once the view's tag differs from `etag` (at once if it already does), or
   * `changed: false` when `waitMs` runs out; null for no such server. Woken by every save and
   * report; a status that turns stale without any write is noticed when it does.
   */
  async viewWait(
    etag: string,
    waitMs: number,
  ): Promise<{ changed: true; etag: string; view: ServerView } | { changed: false; etag: string } | null> {
    const deadline = Date.now() + waitMs;
    for (;;) {
      const view = this.view();
      if (!view) return null;
      const tag = viewTag(view);
      if (tag !== etag) return { changed: true, etag: tag, view };
      const now = Date.now();
      if (deadline - now <= 0) return { changed: false, etag: tag };
      const staleAt = view.report ? view.report.received_at + view.record.stale_after_s * 1000 + 1 : Infinity;
      const park = Math.min(deadline - now, Math.max(staleAt - now, 0) || Infinity);
      await new Promise<void>((resolve) => {
        const wake = () => {
          clearTimeout(timer);
          this.viewWaiters.delete(wake);
          resolve();
        };
        const timer = setTimeout(wake, park);
        this.viewWaiters.add(wake);
      });
    }
  }

  // ---- refresh (issue 8) ----

  private refreshMemo?: RefreshState | null;

  private refreshState(): RefreshState | null {
    if (this.refreshMemo === undefined) this.refreshMemo = this.kv.get<RefreshState>(KEY.refresh) ?? null;
    return this.refreshMemo;
  }

  private pendingRefresh() {
    const r = this.refreshState();
    return r && r.answered_at === null ? r : null;
  }

  /** The first report after a refresh request answers it. */
  private answerRefresh(now: number) {
    const r = this.pendingRefresh();
    if (!r) return;
    const answered = { ...r, answered_at: now };
    this.putMeta(KEY.refresh, answered);
    this.refreshMemo = answered;
  }

  /** Asks the host to report again now: its next poll answers 200, and a parked poll wakes. */
  async requestRefresh(actor: string): Promise<Result<{ view: ServerView }>> {
    const state = this.load();
    if (!state) return fail("not_found", "server does not exist");
    if (state.record.state === "removed") return fail("server_removed", "the server is removed");
    const r: RefreshState = { requested_at: Date.now(), requested_by: actor, answered_at: null };
    this.ctx.storage.transactionSync(() => {
      this.putMeta(KEY.refresh, r);
      this.audit({ actor, action: "server.refresh", target: `server:${state.record.id}` });
    });
    this.refreshMemo = r;
    this.wakeWaiters();
    await this.settle();
    return { ok: true, view: this.view()! };
  }

  // ---- host calls ----

  /**
   * The host's poll. `known` is the generation from its If-None-Match; with `waitMs` the call
   * parks until the generation changes or time runs out, and never touches D1. The token is
   * checked again after parking: a token revoked meanwhile gets nothing.
   */
  async agentDesired(
    tokenHash: string,
    known: number | null,
    waitMs: number,
  ): Promise<
    | { ok: true; notModified: true; generation: number }
    | { ok: true; notModified: false; generation: number; config: DesiredConfig; refresh?: { requested_at: number } }
    | Failure
  > {
    if (!this.authorized(tokenHash)) return fail("unauthorized", "invalid server token");
    let desired = this.load()!.desired;
    if (known === desired.generation && waitMs > 0 && !this.pendingRefresh()) {
      await new Promise<void>((resolve) => {
        const wake = () => {
          clearTimeout(timer);
          this.waiters.delete(wake);
          resolve();
        };
        const timer = setTimeout(wake, waitMs);
        this.waiters.add(wake);
      });
      desired = this.load()!.desired;
    }
    const record = this.authorized(tokenHash);
    if (!record) return fail("unauthorized", "invalid server token");
    // A pending refresh answers 200 even to a current If-None-Match: the host is asked to report.
    const refresh = this.pendingRefresh();
    // A 304 carries no body, so the config is not copied across the RPC boundary for it.
    if (known === desired.generation && !refresh) return { ok: true, notModified: true, generation: desired.generation };
    const config = this.configOf(record, desired);
    if (refresh) return { ok: true, notModified: false, generation: desired.generation, config, refresh: { requested_at: refresh.requested_at } };
    return { ok: true, notModified: false, generation: desired.generation, config };
  }

  async agentReport(
    tokenHash: string,
    report: InventoryReport,
  ): Promise<{ ok: true; generation: number; computed: ComputedStatus } | Failure> {
    const record = this.authorized(tokenHash);
    if (!record) return fail("unauthorized", "invalid server token");
    const { desired, report: previous, reportKey, persistedAt } = this.load()!;
    if (report.generation > desired.generation) {
      return fail(
        "generation_not_issued",
        `report claims generation ${report.generation}, but the newest issued is ${desired.generation}`,
        { desired_generation: desired.generation },
      );
    }
    const now = Date.now();
    const stored: StoredReport = { ...report, received_at: now };
    const unchanged = previous !== undefined && reportKey === contentKey(stored);
    let enqueued = false;
    let acknowledged = false;
    if (unchanged && persistedAt !== undefined && now - persistedAt < HEARTBEAT_PERSIST_MS) {
      // Same content as the stored report: only the heartbeat moved. It lives in memory and is
      // persisted at most every HEARTBEAT_PERSIST_MS (or when the index is told of it), so a
      // steady host costs no storage write, and nothing the index shows can have changed.
      this.cache!.report = stored;
      this.cache!.heartbeatOnly = true;
      this.answerRefresh(now);
      this.wakeViewWaiters();
      if (this.lastSeenDue(now)) {
        this.outbox.enqueue("project", {}, { key: "project" });
        enqueued = true;
      }
    } else {
      this.ctx.storage.transactionSync(() => {
        this.save({ report: stored });
        this.answerRefresh(now);
        // The first report proves the host is up and talking to us.
        if (record.state === "provisioning") this.save({ record: { ...record, state: "active" } });
        if (record.state === "decommissioning") acknowledged = this.acknowledgeLifecycle(record, stored, now);
        if (!unchanged || this.lastSeenDue(now)) this.outbox.enqueue("project", {}, { key: "project" });
        if (!unchanged) this.settleRolloutMarks(stored);
        // A new boot_id: the host rebooted and came back, so any slot it still holds is one whose
        // steady-state call was lost. Slots granted after this moment belong to the new boot.
        if (previous !== undefined && previous.boot_id !== report.boot_id) {
          const release: ReleasePayload = {
            fleet_id: record.fleet_id,
            server_id: record.id,
            from_boot_id: previous.boot_id,
            to_boot_id: report.boot_id,
            seen_at: now,
          };
          this.outbox.enqueue("release", release, { key: "release" });
        }
      });
      enqueued = true;
    }
    if (enqueued) await this.settleInBackground();
    if (acknowledged) this.ctx.waitUntil(this.runCleanup().catch(() => {}));
    return {
      ok: true,
      generation: desired.generation,
      computed: computeStatus(desired, stored, now, record.stale_after_s * 1000),
    };
  }

  // ---- rollouts (issue 9) -------------------------------------------------------------------
  // Kept in one block: a rollout writes a target's next generation here and learns from this
  // ledger's outbox when a report at that generation realizes or fails the agent.

  private rolloutMarks(): Record<string, RolloutMark> {
    return this.kv.get<Record<string, RolloutMark>>(KEY_ROLLOUT_MARKS) ?? {};
  }

  /**
   * Writes the next generation with `agent`'s image changed, remembering which rollout wrote it;
   * or answers why not (already at the image, no such agent, server leaving). A redelivery of the
   * same write answers the same generation and writes nothing.
   */
  async applyRolloutImage(req: ApplyRolloutImage): Promise<ApplyOutcome | Failure> {
    const state = this.load();
    if (!state) return fail("not_found", "server does not exist");
    const marks = this.rolloutMarks();
    const now = Date.now();
    const decision = decideApply(state.desired, state.record.state, marks[req.agent], req, now);
    if (decision.next && decision.mark) {
      const next = decision.next;
      this.ctx.storage.transactionSync(() => {
        this.save({ desired: next });
        this.kv.put(KEY_ROLLOUT_MARKS, { ...marks, [req.agent]: decision.mark });
        this.outbox.enqueue("project", {}, { key: "project" });
        this.audit({
          actor: `rollout:${req.rollout_id}`,
          action: "server.desired.rollout",
          target: `server:${state.record.id}`,
          details: { generation: next.generation, agent: req.agent, image: req.image, version: req.version, pass: req.pass },
        });
      });
      this.wakeWaiters();
      // Not delivered now: the host's report follows within moments and its delivery carries this
      // projection and audit row in the same D1 batch (one projection per target, not two). The
      // alarm delivers them within OUTBOX_SAFETY_MS should no report come.
      await this.scheduler.arm();
    }
    return decision.outcome;
  }

  /** In the report's storage turn: outcomes leave through the outbox, one pending event per rollout. */
  private settleRolloutMarks(report: StoredReport) {
    const marks = this.rolloutMarks();
    if (Object.keys(marks).length === 0) return;
    const { events, remaining } = settleMarks(marks, report, this.load()!.record.id);
    if (events.length === 0) return;
    this.kv.put(KEY_ROLLOUT_MARKS, remaining);
    for (const e of events) this.outbox.enqueue("rollout_event", e, { key: `rollout:${e.rollout_id}` });
  }

  /** Decommissioning: each rollout still waiting on this server hears that it left (its target is skipped). */
  private leaveRollouts(now: number) {
    const marks = this.rolloutMarks();
    const id = this.load()!.record.id;
    for (const m of Object.values(marks)) {
      const e: RolloutEvent = { rollout_id: m.rollout_id, pass: m.pass, server_id: id, generation: m.generation, outcome: "removed", at: now };
      this.outbox.enqueue("rollout_event", e, { key: `rollout:${m.rollout_id}` });
    }
    if (Object.keys(marks).length) this.kv.delete(KEY_ROLLOUT_MARKS);
  }

  // ---- end of rollouts ------------------------------------------------------------------------

  // ---- timers and the index ----

  async alarm() {
    await this.scheduler.fire({ outbox: () => this.outbox.flush(), [CLEANUP_TIMER]: () => this.runCleanup() });
  }

  /** Whether the index's last_seen is old enough to be refreshed (DESIGN §8: a coarse refresh). */
  private lastSeenDue(now: number) {
    const state = this.load();
    if (!state?.report) return false;
    const mark = this.kv.get<ProjectedMark>(KEY.projected);
    const written = mark?.last_seen_written;
    return written == null || now - written >= lastSeenRefreshMs(state.record.stale_after_s);
  }

  /**
   * The projection effect: D1 rows for the ledger as it is when delivered, limited to the rows
   * whose content differs from what the index was last told.
   */
  private projectEffect(): Effect {
    return {
      target: "d1",
      statements: () => {
        this.inFlight = null;
        const state = this.load();
        if (!state) return [];
        // The index never shows a heartbeat the ledger could lose on eviction.
        if (state.heartbeatOnly && state.report) this.save({ report: state.report });
        const mark = this.kv.get<ProjectedMark>(KEY.projected);
        const p = buildProjection(state.record, state.desired, state.report, Date.now());
        const written = mark && !mark.dirty && mark.written ? mark.written : null;
        const lastSeen = p.server.lastSeen ?? null;
        const lastSeenDue =
          lastSeen != null &&
          (mark?.last_seen_written == null || lastSeen - mark.last_seen_written >= lastSeenRefreshMs(state.record.stale_after_s));
        const { statements, serverRow } = projectionStatements(this.db(), p, written, { serverRowDue: lastSeenDue });
        this.inFlight = {
          written: p.signatures,
          last_seen_written: serverRow ? lastSeen : (mark?.last_seen_written ?? null),
        };
        return statements;
      },
      delivered: () => {
        if (this.inFlight) this.kv.put(KEY.projected, this.inFlight);
        this.inFlight = null;
      },
    };
  }
}
