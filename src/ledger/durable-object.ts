import { DurableObject } from "cloudflare:workers";
import { getDb } from "../db/client";
import type { Env } from "../env";
import { digestsEqual } from "../lib/crypto";
import { releaseAfterReboot, retryPendingRelease } from "../fleetlock/ledger-hooks";
import { applyDesired, type DesiredState } from "./desired";
import {
  buildProjection,
  lastSeenRefreshMs,
  sameSignatures,
  type Signatures,
  writeLastSeen,
  writeProjection,
} from "./projection";
import type { ServerRecord } from "./record";
import type { AgentSpec, DesiredConfig, DesiredConfigInput, InventoryReport, StoredReport } from "./schemas";
import { computeStatus, type ComputedStatus } from "./status";
import { upgradeLedgerStorage } from "./storage-format";
import { viewTag } from "./view-tag";

const KEY = {
  record: "record",
  desired: "desired",
  report: "report",
  projected: "projected",
  /** Revision of the FleetLock identity (fleetlock_id, reboot_group); registration is 0. */
  rebootRev: "reboot_rev",
} as const;

interface ProjectedMark {
  /** What the index shows, as last written (absent in marks written before per-row signatures). */
  written?: Signatures | null;
  last_seen_written: number | null;
  /** True while D1 lags behind this ledger; the alarm keeps retrying until it is cleared. */
  dirty: boolean;
  attempts: number;
}

export type LedgerFailure = { ok: false; status: 401 | 404 | 409; code: string; message: string; details?: unknown };

export interface ServerView {
  record: Omit<ServerRecord, "token_hash" | "token_id">;
  desired: DesiredConfig;
  report: StoredReport | null;
  computed: ComputedStatus;
}

const MAX_RETRY_DELAY_MS = 5 * 60_000;

/** When the alarm re-checks a projection that ran in the background after a reply. */
const PROJECTION_SAFETY_MS = 30_000;

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
 * without interleaving and is durable before its reply leaves (output gate).
 */
export class ServerLedger extends DurableObject<Env> {
  private waiters = new Set<() => void>();
  private projecting: Promise<void> = Promise.resolve();

  constructor(ctx: DurableObjectState, env: Env) {
    super(ctx, env);
    // Storage written by older code is brought to this code's format before any call reads it.
    // If it throws, the runtime resets the object and fails every call; storage is untouched.
    ctx
      .blockConcurrencyWhile(async () => {
        const upgraded = upgradeLedgerStorage(ctx.storage);
        // The index learns of what the upgrade changed through the projection retry (alarm).
        if (upgraded?.changed) await ctx.storage.setAlarm(Date.now());
      })
      .catch((err) => console.error("ledger storage upgrade failed:", err));
  }

  private get kv() {
    return this.ctx.storage.kv;
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
    return record && record.state !== "removed" && digestsEqual(record.token_hash, tokenHash) ? record : null;
  }

  /** Creates the ledger with generation 1; a repeated call for the same server changes nothing. */
  async register(record: ServerRecord, agents: Omit<AgentSpec, "instance_id">[]): Promise<ServerView> {
    if (this.load()) return (await this.view())!;
    const desired: DesiredState = {
      generation: 1,
      agents: agents.map((a) => ({ ...a, instance_id: crypto.randomUUID() })),
      lifecycle: "run",
      updated_at: record.created_at,
    };
    this.save({ record, desired });
    await this.project();
    return (await this.view())!;
  }

  async putDesired(
    input: DesiredConfigInput,
  ): Promise<{ ok: true; created: boolean; config: DesiredConfig } | LedgerFailure> {
    const state = this.load();
    if (!state) return { ok: false, status: 404, code: "not_found", message: "server does not exist" };
    const outcome = applyDesired(state.desired, input, Date.now());
    switch (outcome.kind) {
      case "stale_generation":
        return {
          ok: false,
          status: 409,
          code: "stale_generation",
          message: `generation ${input.generation} is older than the current generation ${outcome.current.generation}`,
          details: { current_generation: outcome.current.generation },
        };
      case "generation_conflict":
        return {
          ok: false,
          status: 409,
          code: "generation_conflict",
          message: `generation ${input.generation} already holds a different config`,
          details: { current_generation: outcome.current.generation },
        };
      case "unchanged":
        return { ok: true, created: false, config: this.configOf(state.record, outcome.current) };
      case "accepted": {
        this.save({ desired: outcome.next });
        for (const wake of this.waiters) wake();
        this.waiters.clear();
        await this.project();
        return { ok: true, created: true, config: this.configOf(state.record, outcome.next) };
      }
    }
  }

  /**
   * The host's poll. `known` is the generation from its If-None-Match; with `waitMs` the call
   * parks until the generation changes or time runs out, and never touches D1.
   */
  async agentDesired(
    tokenHash: string,
    known: number | null,
    waitMs: number,
  ): Promise<
    | { ok: true; notModified: true; generation: number }
    | { ok: true; notModified: false; generation: number; config: DesiredConfig }
    | LedgerFailure
  > {
    const record = this.authorized(tokenHash);
    if (!record) return { ok: false, status: 401, code: "unauthorized", message: "invalid server token" };
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
    // A 304 carries no body, so the config is not copied across the RPC boundary for it.
    if (known === desired.generation) return { ok: true, notModified: true, generation: desired.generation };
    return { ok: true, notModified: false, generation: desired.generation, config: this.configOf(record, desired) };
  }

  async agentReport(
    tokenHash: string,
    report: InventoryReport,
  ): Promise<{ ok: true; generation: number; computed: ComputedStatus } | LedgerFailure> {
    const record = this.authorized(tokenHash);
    if (!record) return { ok: false, status: 401, code: "unauthorized", message: "invalid server token" };
    const { desired, report: previous, reportKey, persistedAt } = this.load()!;
    if (report.generation > desired.generation) {
      return {
        ok: false,
        status: 409,
        code: "generation_not_issued",
        message: `report claims generation ${report.generation}, but the newest issued is ${desired.generation}`,
        details: { desired_generation: desired.generation },
      };
    }
    const now = Date.now();
    const stored: StoredReport = { ...report, received_at: now };
    const previousBootId = previous?.boot_id;
    const unchanged = previous !== undefined && reportKey === contentKey(stored);
    if (unchanged && persistedAt !== undefined && now - persistedAt < HEARTBEAT_PERSIST_MS) {
      // Same content as the stored report: only the heartbeat moved. It lives in memory and is
      // persisted at most every HEARTBEAT_PERSIST_MS (or when the index is told of it), so a
      // steady host costs no storage write, and nothing the index shows can have changed.
      this.cache!.report = stored;
      this.cache!.heartbeatOnly = true;
      this.wakeViewWaiters();
    } else {
      this.save({ report: stored });
    }
    // The first report proves the host is up and talking to us.
    if (record.state === "provisioning") this.save({ record: { ...record, state: "active" } });
    // The host's answer does not wait for D1: the report is durable here already, the projection
    // follows in the background (waitUntil keeps the object alive for it), and an armed alarm
    // repairs the index should the object die first.
    if (!unchanged) await this.armProjectionAlarm();
    this.ctx.waitUntil(this.project(unchanged));
    // Reboot coordination: a new boot_id means the host rebooted; free any slot it still holds.
    if (previousBootId !== undefined && previousBootId !== report.boot_id) {
      await releaseAfterReboot(this.ctx.storage, this.env, record, previousBootId, report.boot_id, now);
    }
    return {
      ok: true,
      generation: desired.generation,
      computed: computeStatus(desired, stored, now, record.stale_after_s * 1000),
    };
  }

  async view(): Promise<ServerView | null> {
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

  // ---- Operators waiting on the view (GET /v1/servers/{id}?wait=S) ----
  private viewWaiters = new Set<() => void>();

  private wakeViewWaiters() {
    for (const wake of this.viewWaiters) wake();
    this.viewWaiters.clear();
  }

  /**
   * Answers once the view's tag differs from `etag` (at once if it already does), or
   * `changed: false` when `waitMs` runs out. Woken by every save and report; a status that turns
   * stale without any write is noticed when it does.
   */
  async viewWait(
    etag: string,
    waitMs: number,
  ): Promise<{ changed: true; etag: string; view: ServerView } | { changed: false; etag: string } | null> {
    const deadline = Date.now() + waitMs;
    for (;;) {
      const view = await this.view();
      if (!view) return null;
      const tag = viewTag(view);
      if (tag !== etag) return { changed: true, etag: tag, view };
      const now = Date.now();
      const staleAt = view.report ? view.report.received_at + view.record.stale_after_s * 1000 + 1 : Infinity;
      const park = Math.min(deadline - now, Math.max(staleAt - now, 0) || Infinity);
      if (deadline - now <= 0) return { changed: false, etag: tag };
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

  /** The host's token stops working at once; the D1 token row is marked by the caller. */
  async revokeToken(): Promise<boolean> {
    const record = this.load()?.record;
    if (!record) return false;
    this.save({ record: { ...record, token_hash: "" } });
    return true;
  }

  /**
   * Changes the server's FleetLock identity (PATCH /v1/servers/{id}). Each change gets the next
   * revision, so the coordinator can ignore a push that arrives after a newer one.
   */
  async setRebootIdentity(change: {
    fleetlock_id?: string | null;
    reboot_group?: string;
  }): Promise<{ ok: true; view: ServerView; rev: number } | LedgerFailure> {
    const record = this.load()?.record;
    if (!record) return { ok: false, status: 404, code: "not_found", message: "server does not exist" };
    if (record.state === "removed") {
      return { ok: false, status: 409, code: "server_removed", message: "a removed server cannot be changed" };
    }
    const next: ServerRecord = {
      ...record,
      fleetlock_id: change.fleetlock_id === undefined ? record.fleetlock_id : change.fleetlock_id,
      reboot_group: change.reboot_group ?? record.reboot_group,
    };
    const rev = (this.kv.get<number>(KEY.rebootRev) ?? 0) + 1;
    this.save({ record: next });
    this.kv.put(KEY.rebootRev, rev);
    await this.project();
    return { ok: true, view: (await this.view())!, rev };
  }

  /** Retries a projection that D1 refused, until the index matches the ledger. */
  async alarm() {
    this.projectionAlarmArmed = false;
    await this.project();
    const record = this.load()?.record;
    if (record) await retryPendingRelease(this.ctx.storage, this.env, record.id);
  }

  /**
   * Brings D1 in line with this ledger. Calls are chained so an older projection can never land
   * after a newer one; each reads the state as it is when its turn comes.
   */
  private projectionAlarmArmed = false;

  /** Never postpones an earlier alarm (retries with backoff share it). */
  private async armProjectionAlarm() {
    if (this.projectionAlarmArmed) return;
    const at = Date.now() + PROJECTION_SAFETY_MS;
    const current = await this.ctx.storage.getAlarm();
    if (current === null || current > at) await this.ctx.storage.setAlarm(at);
    this.projectionAlarmArmed = true;
  }

  private project(contentUnchanged = false): Promise<void> {
    const run = this.projecting.then(() => this.projectOnce(contentUnchanged));
    this.projecting = run.catch(() => {});
    return run;
  }

  /**
   * `contentUnchanged`: the caller only moved the heartbeat of an identical report, so the
   * signature cannot have changed (desired changes project themselves) and is not rebuilt.
   */
  private async projectOnce(contentUnchanged = false) {
    const state = this.load();
    if (!state) return;
    const now = Date.now();
    const mark = this.kv.get<ProjectedMark>(KEY.projected);
    const lastSeen = state.report?.received_at;
    const lastSeenDue =
      lastSeen != null &&
      (mark?.last_seen_written == null ||
        lastSeen - mark.last_seen_written >= lastSeenRefreshMs(state.record.stale_after_s));
    if (contentUnchanged && mark && !mark.dirty && !lastSeenDue) return;
    const p = buildProjection(state.record, state.desired, state.report, now);
    // A mark that is dirty (or predates per-row signatures) cannot say what D1 holds: rewrite it all.
    const written = mark && !mark.dirty && mark.written ? mark.written : null;
    const changed = !written || !sameSignatures(written, p.signatures);
    if (!changed && !lastSeenDue) return;
    // The index never shows a heartbeat the ledger could lose on eviction.
    if (state.heartbeatOnly && state.report) this.save({ report: state.report });
    try {
      const db = getDb(this.env.DB);
      if (changed) await writeProjection(db, p, written, { serverRowDue: lastSeenDue });
      else await writeLastSeen(db, p);
      this.kv.put(KEY.projected, {
        written: p.signatures,
        last_seen_written: p.server.lastSeen ?? null,
        dirty: false,
        attempts: 0,
      } satisfies ProjectedMark);
    } catch (err) {
      // The ledger already holds the truth; D1 catches up when the alarm retries.
      const attempts = (mark?.attempts ?? 0) + 1;
      this.kv.put(KEY.projected, {
        written: mark?.written ?? null,
        last_seen_written: mark?.last_seen_written ?? null,
        dirty: true,
        attempts,
      } satisfies ProjectedMark);
      await this.ctx.storage.setAlarm(now + Math.min(1000 * 2 ** (attempts - 1), MAX_RETRY_DELAY_MS));
      console.warn(`projection of server ${state.record.id} failed (attempt ${attempts}):`, err);
    }
  }
}
