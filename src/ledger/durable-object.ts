import { DurableObject } from "cloudflare:workers";
import { auditEvent, type AuditEntry } from "../audit/log";
import { getDb } from "../db/client";
import type { Env } from "../env";
import { digestsEqual } from "../lib/crypto";
import { Outbox, type Effect } from "../objects/kit/outbox";
import { fail, type Failure } from "../objects/kit/result";
import { Scheduler } from "../objects/kit/scheduler";
import { applyDesired, type DesiredState } from "./desired";
import { identityPayload, ledgerEffects, tokenPayload, type LedgerEffectKind, type ReleasePayload } from "./effects";
import { buildProjection, lastSeenRefreshMs, projectionStatements, type Signatures } from "./projection";
import type { ServerRecord } from "./record";
import type { AgentSpec, DesiredConfig, DesiredConfigInput, InventoryReport, StoredReport } from "./schemas";
import { computeStatus, type ComputedStatus } from "./status";
import { upgradeLedgerStorage } from "./storage-format";
import { decideApply, settleMarks, type ApplyOutcome, type ApplyRolloutImage, type RolloutMark } from "../rollouts/ledger-side";

const KEY = {
  record: "record",
  desired: "desired",
  report: "report",
  projected: "projected",
  /** Revision of the FleetLock identity (fleetlock_id, reboot_group); registration is 0. */
  rebootRev: "reboot_rev",
  /** Written by the previous release's hook when the coordinator missed a release; moved to the outbox on load. */
  legacyPendingRelease: "fleetlock_release_pending",
} as const;

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
    meta: { actor: string; details?: unknown },
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
        const config = this.configOf(state.record, outcome.next);
        this.ctx.storage.transactionSync(() => {
          this.save({ desired: outcome.next });
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
      desired: this.configOf(state.record, state.desired),
      report: state.report ?? null,
      computed: computeStatus(state.desired, state.report, Date.now(), state.record.stale_after_s * 1000),
    };
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
    | { ok: true; notModified: false; generation: number; config: DesiredConfig }
    | Failure
  > {
    if (!this.authorized(tokenHash)) return fail("unauthorized", "invalid server token");
    let desired = this.load()!.desired;
    if (known === desired.generation && waitMs > 0) {
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
    // A 304 carries no body, so the config is not copied across the RPC boundary for it.
    if (known === desired.generation) return { ok: true, notModified: true, generation: desired.generation };
    return { ok: true, notModified: false, generation: desired.generation, config: this.configOf(record, desired) };
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
    if (unchanged && persistedAt !== undefined && now - persistedAt < HEARTBEAT_PERSIST_MS) {
      // Same content as the stored report: only the heartbeat moved. It lives in memory and is
      // persisted at most every HEARTBEAT_PERSIST_MS (or when the index is told of it), so a
      // steady host costs no storage write, and nothing the index shows can have changed.
      this.cache!.report = stored;
      this.cache!.heartbeatOnly = true;
      if (this.lastSeenDue(now)) {
        this.outbox.enqueue("project", {}, { key: "project" });
        enqueued = true;
      }
    } else {
      this.ctx.storage.transactionSync(() => {
        this.save({ report: stored });
        // The first report proves the host is up and talking to us.
        if (record.state === "provisioning") this.save({ record: { ...record, state: "active" } });
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
      await this.settleInBackground();
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

  // ---- end of rollouts ------------------------------------------------------------------------

  // ---- timers and the index ----

  async alarm() {
    await this.scheduler.fire({ outbox: () => this.outbox.flush() });
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
