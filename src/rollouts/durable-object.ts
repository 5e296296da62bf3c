import { DurableObject } from "cloudflare:workers";
import { sql } from "drizzle-orm";
import { auditEvent, auditInsertOnce, type AuditEntry, type AuditEvent } from "../audit/log";
import { getDb } from "../db/client";
import { rolloutLocks, rollouts, rolloutTargets } from "../db/schema";
import type { Env } from "../env";
import type { FleetSettings } from "../fleetlock/durable-object";
import { ledgerOf, coordinatorOf } from "../objects/stubs";
import { Outbox, type Effect } from "../objects/kit/outbox";
import { fail, type Failure } from "../objects/kit/result";
import { Scheduler } from "../objects/kit/scheduler";
import { and, eq } from "drizzle-orm";
import { moveChannel, restoreChannel, type ChannelImage } from "./channel";
import type { ApplyOutcome, RolloutEvent } from "./ledger-side";
import {
  account,
  control,
  etaSeconds,
  finish,
  isEnded,
  isSlow,
  isTerminal,
  median,
  newCore,
  quiescent,
  skippedQueued,
  startable,
  stepTarget,
  zeroCounts,
  type Control,
  type Core,
  type RolloutSpec,
  type RolloutState,
  type Target,
  type TargetEvent,
  type TargetState, slotHolderId } from "./machine";
import { chunk } from "../lib/chunk";
import { fleetSettings } from "../fleets/store";

/** A target as the service selected it from the index. */
export interface TargetInput {
  server_id: string;
  hostname: string;
  reboot_group: string;
  excluded: boolean;
}

/** A refused reboot slot is asked for again after this long. */
export const SLOT_RETRY_MS = 5_000;
/** Target rows per D1 projection batch; the rest follow in the next. */
const PROJECT_ROWS = 400;
/** Rows per multi-row upsert: D1 binds at most 100 parameters per statement (12 columns a row). */
const ROWS_PER_STATEMENT = 8;
/** How long target changes may wait to reach the index together. */
export const PROJECT_EVERY_MS = 1_000;
/** Ledger writes and slot requests delivered at once. */
const CALL_CONCURRENCY = 32;

type EffectKind = "project" | "audit" | "apply" | "slot" | "release" | "unlock" | "lock" | "channel";

interface ChannelRecord {
  updated: boolean;
  previous: ChannelImage | null;
}

type Row = Omit<Target, "warned"> & { warned: number; duration_ms: number | null; dirty: number; not_before: number };

const COLS =
  "pass, server_id, seq, hostname, reboot_group, state, image, version, from_image, from_version, generation, slot, started_at, ended_at, reason, warned";

const toTarget = (r: Row): Target => ({ ...r, warned: r.warned === 1 });

export interface RolloutSummary {
  id: string;
  fleet: string;
  agent: string;
  image: string;
  version: string;
  state: RolloutState;
  pass: number;
  reason: string | null;
  concurrency: number;
  server_timeout_s: number | null;
  slow_factor: number | null;
  abort: RolloutSpec["abort"];
  update_channel: boolean;
  channel_updated: boolean | null;
  reboot_slot: boolean;
  counts: Record<TargetState, number>;
  total: number;
  median_s: number | null;
  eta_s: number | null;
  warnings: { server_id: string; hostname: string; at: number; message: string }[];
  created_by: string;
  created_at: number;
  ended_at: number | null;
  version_seq: number;
}

/**
 * One per rollout: its targets and their states (SQL in its own storage), its counters, its
 * timers (per-target timeouts, slow-server checks, slot retries) on one alarm. It writes each
 * target's next generation through the target's ledger and learns outcomes from the ledgers'
 * outboxes; everything it means for D1 (rollout and target rows, audit, the (fleet, agent) lock)
 * and for the coordinator (reboot slots) leaves through its own outbox. Transitions are the pure
 * functions of machine.ts, each applied in one synchronous storage turn.
 */
export class Rollout extends DurableObject<Env> {
  private readonly scheduler: Scheduler;
  private readonly outbox: Outbox<EffectKind>;
  private waiters = new Set<() => void>();
  private cache: { spec: RolloutSpec; core: Core } | null = null;
  private inFlight: { pass: number; server_id: string; dirty: number }[] = [];

  constructor(ctx: DurableObjectState, env: Env) {
    super(ctx, env);
    const sqlx = ctx.storage.sql;
    sqlx.exec(`CREATE TABLE IF NOT EXISTS targets (
      pass INTEGER NOT NULL, server_id TEXT NOT NULL, seq INTEGER NOT NULL, hostname TEXT NOT NULL,
      reboot_group TEXT NOT NULL, state TEXT NOT NULL, image TEXT NOT NULL, version TEXT NOT NULL,
      from_image TEXT, from_version TEXT, generation INTEGER, slot TEXT NOT NULL DEFAULT 'none',
      started_at INTEGER, ended_at INTEGER, duration_ms INTEGER, reason TEXT, warned INTEGER NOT NULL DEFAULT 0,
      not_before INTEGER NOT NULL DEFAULT 0, dirty INTEGER NOT NULL DEFAULT 1,
      PRIMARY KEY (pass, server_id))`);
    sqlx.exec("CREATE INDEX IF NOT EXISTS targets_state ON targets (pass, state, seq)");
    sqlx.exec("CREATE INDEX IF NOT EXISTS targets_seq ON targets (pass, seq)");
    sqlx.exec("CREATE INDEX IF NOT EXISTS targets_duration ON targets (pass, state, duration_ms)");
    sqlx.exec("CREATE INDEX IF NOT EXISTS targets_started ON targets (pass, state, warned, started_at)");
    sqlx.exec("CREATE INDEX IF NOT EXISTS targets_dirty ON targets (dirty) WHERE dirty > 0");
    sqlx.exec(`CREATE TABLE IF NOT EXISTS events (
      id INTEGER PRIMARY KEY AUTOINCREMENT, at INTEGER NOT NULL, kind TEXT NOT NULL,
      server_id TEXT, details TEXT)`);
    sqlx.exec("CREATE INDEX IF NOT EXISTS events_kind ON events (kind, id)");
    this.scheduler = new Scheduler(ctx.storage);
    const db = () => getDb(this.env.DB);
    this.outbox = new Outbox<EffectKind>(ctx.storage, this.scheduler, this.effects(), db, CALL_CONCURRENCY);
  }

  // ---- state ----

  private get kv() {
    return this.ctx.storage.kv;
  }

  private load() {
    if (!this.cache) {
      const spec = this.kv.get<RolloutSpec>("spec");
      const core = this.kv.get<Core>("core");
      if (!spec || !core) return null;
      this.cache = { spec, core };
    }
    return this.cache;
  }

  private putCore(core: Core) {
    this.kv.put("core", core);
    this.cache!.core = core;
    this.wake();
  }

  private wake() {
    for (const w of this.waiters) w();
    this.waiters.clear();
  }

  private target(pass: number, serverId: string): Target | null {
    const r = this.ctx.storage.sql.exec<Row>(`SELECT ${COLS} FROM targets WHERE pass = ? AND server_id = ?`, pass, serverId).toArray()[0];
    return r ? toTarget(r) : null;
  }

  private event(kind: string, serverId: string | null, details: unknown, at = Date.now()) {
    this.ctx.storage.sql.exec(
      "INSERT INTO events (at, kind, server_id, details) VALUES (?, ?, ?, ?)",
      at,
      kind,
      serverId,
      details === undefined ? null : JSON.stringify(details),
    );
  }

  private audit(entry: Omit<AuditEntry, "target">) {
    this.outbox.enqueue("audit", auditEvent({ ...entry, target: `rollout:${this.load()!.spec.id}` }));
  }

  private project() {
    this.outbox.enqueue("project", {}, { key: "project" });
  }

  /** Target changes reach the index at most every PROJECT_EVERY_MS, many rows to a batch. */
  private projectSoon(now: number) {
    this.scheduler.schedule("project", now + PROJECT_EVERY_MS, null, { noLaterThan: true });
  }

  /** Commits with the caller's turn; the answer may wait for delivery (operator) or not (events). */
  private async settle(wait: boolean) {
    await this.scheduler.arm();
    if (wait) await this.outbox.flush();
    else this.ctx.waitUntil(this.outbox.flush());
  }

  // ---- transitions ----

  /**
   * Applies one target event and everything it implies in the same turn: the target row, the
   * core, the event log, timers, slot release, bulk skips, entering a new rollout state.
   */
  private change(t: Target, e: TargetEvent, now: number): Target | null {
    const { spec, core } = this.load()!;
    const after = stepTarget(t, e);
    if (!after) return null;
    const out = account(core, spec, t, after, now);
    const sqlx = this.ctx.storage.sql;
    const duration = isEnded(after.state) && after.started_at !== null ? now - after.started_at : null;
    sqlx.exec(
      `UPDATE targets SET state = ?, generation = ?, from_image = ?, from_version = ?, slot = ?, started_at = ?,
         ended_at = ?, reason = ?, duration_ms = ?, dirty = dirty + ? WHERE pass = ? AND server_id = ?`,
      after.state,
      after.generation,
      after.from_image,
      after.from_version,
      after.slot,
      after.started_at,
      after.ended_at,
      after.reason,
      duration,
      // The index learns of a target when it is created and when it ends; what is in flight is
      // read from this object (GET …/targets), so the index is not rewritten at every step.
      isEnded(after.state) && !isEnded(t.state) ? 1 : 0,
      after.pass,
      after.server_id,
    );
    let nextCore = out.core;
    if (t.state !== after.state) this.event(`target.${after.state}`, after.server_id, { pass: after.pass, generation: after.generation, reason: after.reason }, now);
    if (isEnded(after.state) && !isEnded(t.state)) {
      this.scheduler.cancel(`timeout:${after.pass}:${after.server_id}`);
      if (after.slot === "held") this.outbox.enqueue("release", { server_id: after.server_id }, { key: `release:${after.server_id}` });
      // A target of the forward pass that finishes during the rollback is rolled back too.
      if (after.state === "done" && after.pass < nextCore.pass && this.rollingBack(nextCore) && after.from_image) {
        nextCore = this.queueRollback([{ ...after }], nextCore);
      }
    }
    if (out.skipQueued) nextCore = this.skipQueued(nextCore, nextCore.pass, out.skipQueued, now);
    this.putCore(nextCore);
    if (after.state === "done" && t.state !== "done" && duration !== null) {
      this.recordDuration(after.pass, duration);
      this.warnIfSlow(after, duration, true, now);
    }
    if (out.entered) this.entered(out.entered, now);
    if (out.entered) this.project();
    else this.projectSoon(now);
    return after;
  }

  private rollingBack(core: Core) {
    return core.state === "rolling_back" || (core.state === "paused" && core.paused_from === "rolling_back");
  }

  /** Queued targets of a pass become skipped (cancel, abort, rollback); slot requests under way are dropped. */
  private skipQueued(core: Core, pass: number, reason: string, now: number): Core {
    const sqlx = this.ctx.storage.sql;
    const { n, req } = sqlx
      .exec<{ n: number; req: number }>(
        "SELECT COUNT(*) AS n, COALESCE(SUM(slot = 'requested'), 0) AS req FROM targets WHERE pass = ? AND state = 'queued'",
        pass,
      )
      .one();
    if (n === 0) return core;
    sqlx.exec(
      `UPDATE targets SET state = 'skipped', reason = ?, ended_at = ?, slot = 'none', dirty = dirty + 1
       WHERE pass = ? AND state = 'queued'`,
      reason,
      now,
      pass,
    );
    this.event("targets.skipped", null, { pass, count: n, reason }, now);
    const next = pass === core.pass ? skippedQueued(core, n) : core;
    return { ...next, slot_requests: next.slot_requests - req };
  }

  /** Inserts rollback-pass rows for targets done in the forward pass, back to the image each had. */
  private queueRollback(done: Target[], core: Core): Core {
    let n = 0;
    for (const t of done) {
      if (!t.from_image || !t.from_version) continue;
      this.ctx.storage.sql.exec(
        `INSERT OR IGNORE INTO targets (pass, server_id, seq, hostname, reboot_group, state, image, version, slot)
         VALUES (?, ?, ?, ?, ?, 'queued', ?, ?, 'none')`,
        core.pass,
        t.server_id,
        t.seq,
        t.hostname,
        t.reboot_group,
        t.from_image,
        t.from_version,
      );
      n++;
    }
    return { ...core, counts: { ...core.counts, queued: core.counts.queued + n } };
  }

  /** The rollout entered a state: audited, logged, and what it means for the channel. */
  private entered(state: RolloutState, now: number) {
    const { spec, core } = this.load()!;
    this.event(`rollout.${state}`, null, { reason: core.reason, pass: core.pass }, now);
    this.audit({ actor: `rollout:${spec.id}`, action: `rollout.${state}`, details: { reason: core.reason, counts: core.counts, pass: core.pass } });
    if (state === "rolling_back" && spec.update_channel) this.outbox.enqueue("channel", { to: "previous" }, { key: "channel" });
  }

  /** Starts as many queued targets as concurrency allows (a reboot_slot rollout asks for slots first). */
  private pump(now: number) {
    const state = this.load();
    if (!state) return;
    const n = startable(state.core, state.spec);
    if (n <= 0) return;
    const rows = this.ctx.storage.sql
      .exec<Row>(
        `SELECT ${COLS} FROM targets WHERE pass = ? AND state = 'queued' AND slot = 'none' AND not_before <= ? ORDER BY seq LIMIT ?`,
        state.core.pass,
        now,
        n,
      )
      .toArray();
    for (const r of rows) {
      const t = toTarget(r);
      if (state.spec.reboot_slot) {
        if (this.change(t, { type: "slot_requested" }, now)) {
          this.outbox.enqueue("slot", { pass: t.pass, server_id: t.server_id }, { key: `slot:${t.pass}:${t.server_id}` });
        }
      } else {
        this.begin(t, now);
      }
    }
    // Targets waiting out a slot refusal are tried again when the earliest may.
    if (state.spec.reboot_slot && startable(this.load()!.core, state.spec) > 0) {
      const next = this.ctx.storage.sql
        .exec<{ at: number | null }>("SELECT MIN(not_before) AS at FROM targets WHERE pass = ? AND state = 'queued' AND not_before > ?", state.core.pass, now)
        .one().at;
      if (next !== null) this.scheduler.schedule("pump", next, null, { noLaterThan: true });
    }
  }

  /** queued → applying: the ledger write leaves through the outbox, the timeout starts. */
  private begin(t: Target, now: number) {
    const { spec } = this.load()!;
    const started = this.change(t, { type: "start", at: now }, now);
    if (!started) return;
    this.outbox.enqueue("apply", { pass: t.pass, server_id: t.server_id }, { key: `apply:${t.pass}:${t.server_id}` });
    if (spec.server_timeout_s) this.scheduler.schedule(`timeout:${t.pass}:${t.server_id}`, now + spec.server_timeout_s * 1000);
    this.scheduleSlowCheck();
  }

  // ---- slow servers ----

  /** Durations of the current pass's done targets, sorted; kept in memory, rebuilt after a wake. */
  private durations: { pass: number; sorted: number[] } | null = null;

  private doneDurations(): number[] {
    const { core } = this.load()!;
    if (!this.durations || this.durations.pass !== core.pass) {
      const sorted = this.ctx.storage.sql
        .exec<{ d: number }>("SELECT duration_ms AS d FROM targets WHERE pass = ? AND state = 'done' ORDER BY duration_ms", core.pass)
        .toArray()
        .map((r) => r.d);
      this.durations = { pass: core.pass, sorted };
    }
    return this.durations.sorted;
  }

  private recordDuration(pass: number, ms: number) {
    const sorted = this.doneDurations();
    if (this.durations!.pass !== pass) return;
    let lo = 0;
    let hi = sorted.length;
    while (lo < hi) {
      const mid = (lo + hi) >> 1;
      if (sorted[mid] <= ms) lo = mid + 1;
      else hi = mid;
    }
    sorted.splice(lo, 0, ms);
  }

  private medianMs(): number | null {
    return median(this.doneDurations());
  }

  private warnIfSlow(t: Target, elapsed: number, ended: boolean, now: number) {
    const { spec } = this.load()!;
    if (t.warned) return;
    const m = this.medianMs();
    if (!isSlow(elapsed, m, spec.slow_factor)) return;
    this.ctx.storage.sql.exec("UPDATE targets SET warned = 1 WHERE pass = ? AND server_id = ?", t.pass, t.server_id);
    const message = `${t.hostname} ${ended ? "took" : "has taken"} ${Math.round(elapsed / 1000)} s, over ${spec.slow_factor} x the median ${Math.round(m! / 1000)} s`;
    this.event("warning.slow_server", t.server_id, { hostname: t.hostname, elapsed_ms: elapsed, median_ms: m, message }, now);
  }

  /** One timer for the oldest applying target not yet warned about, at the moment it turns slow. */
  private scheduleSlowCheck() {
    const { spec, core } = this.load()!;
    if (!spec.slow_factor) return;
    const m = this.medianMs();
    if (m === null) return;
    const oldest = this.ctx.storage.sql
      .exec<{ at: number | null }>("SELECT MIN(started_at) AS at FROM targets WHERE pass = ? AND state = 'applying' AND warned = 0", core.pass)
      .one().at;
    if (oldest === null) this.scheduler.cancel("slow");
    else this.scheduler.schedule("slow", oldest + spec.slow_factor * m + 1);
  }

  private checkSlow(now: number) {
    const { spec, core } = this.load()!;
    const m = this.medianMs();
    if (!spec.slow_factor || m === null) return;
    const rows = this.ctx.storage.sql
      .exec<Row>(
        `SELECT ${COLS} FROM targets WHERE pass = ? AND state = 'applying' AND warned = 0 AND started_at < ? ORDER BY started_at LIMIT 100`,
        core.pass,
        now - spec.slow_factor * m,
      )
      .toArray();
    for (const r of rows) this.warnIfSlow(toTarget(r), now - r.started_at!, false, now);
    if (rows.length) this.putCore({ ...this.load()!.core, version: this.load()!.core.version + 1 });
    this.scheduleSlowCheck();
  }

  // ---- RPC: start, operator controls, reads ----

  /** Creates the rollout and starts its first targets; a repeated call changes nothing. */
  async start(spec: RolloutSpec, targets: TargetInput[]): Promise<RolloutSummary> {
    if (!this.load()) {
      const now = Date.now();
      this.ctx.storage.transactionSync(() => {
        const core = newCore();
        const counts = zeroCounts();
        targets.forEach((t, i) => {
          const state: TargetState = t.excluded ? "skipped" : "queued";
          counts[state]++;
          this.ctx.storage.sql.exec(
            `INSERT INTO targets (pass, server_id, seq, hostname, reboot_group, state, image, version, ended_at, reason)
             VALUES (0, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
            t.server_id,
            i,
            t.hostname,
            t.reboot_group,
            state,
            spec.image,
            spec.version,
            t.excluded ? now : null,
            t.excluded ? "excluded" : null,
          );
        });
        this.kv.put("spec", spec);
        this.kv.put("core", { ...core, counts });
        this.cache = { spec, core: { ...core, counts } };
        this.event("rollout.running", null, { targets: targets.length, excluded: counts.skipped }, now);
        this.audit({ actor: spec.created_by, action: "rollout.start", details: { ...spec, targets: targets.length, excluded: counts.skipped } });
        if (spec.update_channel) this.outbox.enqueue("channel", { to: "rollout" }, { key: "channel" });
        const done = finish(this.load()!.core, now);
        this.putCore(done.core);
        if (done.entered) this.entered(done.entered, now);
        this.pump(now);
        this.afterChange();
        this.project();
      });
      await this.settle(true);
    }
    return this.summary();
  }

  /** pause | resume | cancel | rollback, audited with the operator's name. */
  async control(action: Control, actor: string): Promise<{ ok: true; summary: RolloutSummary } | Failure> {
    const state = this.load();
    if (!state) return fail("not_found", "rollout does not exist");
    const now = Date.now();
    const before = state.core;
    const out = control(before, action, now);
    if (!out.ok) return fail("invalid_state", out.message, { state: before.state });
    this.ctx.storage.transactionSync(() => {
      let core = out.core;
      this.audit({ actor, action: `rollout.${action}`, details: { from: before.state, to: core.state } });
      if (out.newPass) {
        // Queued forward targets will not run; those done go back to the image each had before.
        core = this.skipQueued({ ...core, pass: before.pass }, before.pass, out.skipQueued!, now);
        core = { ...core, pass: out.core.pass, counts: zeroCounts(), slot_requests: core.slot_requests };
        const done = this.ctx.storage.sql
          .exec<Row>(`SELECT ${COLS} FROM targets WHERE pass = ? AND state = 'done' ORDER BY seq`, before.pass)
          .toArray()
          .map(toTarget);
        core = this.queueRollback(done, core);
        // The service claimed the (fleet, agent) again; should an earlier release have raced it, this re-claims.
        this.kv.put("unlocked", false);
        this.outbox.enqueue("lock", {}, { key: "lock" });
      } else if (out.skipQueued) {
        core = this.skipQueued(core, core.pass, out.skipQueued, now);
      }
      const finished = finish(core, now);
      this.putCore(finished.core);
      if (out.entered) this.entered(out.entered, now);
      if (finished.entered) this.entered(finished.entered, now);
      this.pump(now);
      this.afterChange();
      this.project();
    });
    await this.settle(true);
    return { ok: true, summary: this.summary() };
  }

  /** The summary now, or (with `waitMs`) once its version moves past `known`. */
  async get(known: number | null, waitMs: number): Promise<RolloutSummary | null> {
    const state = this.load();
    if (!state) return null;
    // A rollout that has ended with nothing in flight changes only by an operator's rollback: no wait.
    if (waitMs > 0 && !quiescent(state.core) && (known === null || known === state.core.version)) {
      await new Promise<void>((resolve) => {
        const wake = () => {
          clearTimeout(timer);
          this.waiters.delete(wake);
          resolve();
        };
        const timer = setTimeout(wake, waitMs);
        this.waiters.add(wake);
      });
    }
    return this.summary();
  }

  async targets(opts: { pass?: number; state?: TargetState; after: number; limit: number }) {
    const state = this.load();
    if (!state) return null;
    const pass = opts.pass ?? state.core.pass;
    // Two statements rather than "(? IS NULL OR state = ?)", so each uses its index.
    const rows = (
      opts.state
        ? this.ctx.storage.sql.exec<Row & { duration_ms: number | null }>(
            `SELECT ${COLS}, duration_ms FROM targets WHERE pass = ? AND state = ? AND seq > ? ORDER BY seq LIMIT ?`,
            pass,
            opts.state,
            opts.after,
            opts.limit + 1,
          )
        : this.ctx.storage.sql.exec<Row & { duration_ms: number | null }>(
            `SELECT ${COLS}, duration_ms FROM targets WHERE pass = ? AND seq > ? ORDER BY seq LIMIT ?`,
            pass,
            opts.after,
            opts.limit + 1,
          )
    ).toArray();
    return rows.map((r) => ({ ...toTarget(r), duration_ms: r.duration_ms }));
  }

  async events(opts: { after: number; limit: number }) {
    if (!this.load()) return null;
    return this.ctx.storage.sql
      .exec<{ id: number; at: number; kind: string; server_id: string | null; details: string | null }>(
        "SELECT id, at, kind, server_id, details FROM events WHERE id > ? ORDER BY id LIMIT ?",
        opts.after,
        opts.limit + 1,
      )
      .toArray();
  }

  summary(): RolloutSummary {
    const { spec, core } = this.load()!;
    const m = this.medianMs();
    const channel = this.kv.get<ChannelRecord>("channel");
    const warnings = this.ctx.storage.sql
      .exec<{ server_id: string; at: number; details: string }>(
        "SELECT server_id, at, details FROM events WHERE kind = 'warning.slow_server' ORDER BY id DESC LIMIT 50",
      )
      .toArray()
      .map((w) => {
        const d = JSON.parse(w.details) as { hostname: string; message: string };
        return { server_id: w.server_id, hostname: d.hostname, at: w.at, message: d.message };
      });
    const total = Object.values(core.counts).reduce((a, b) => a + b, 0);
    return {
      id: spec.id,
      fleet: spec.fleet,
      agent: spec.agent,
      image: spec.image,
      version: spec.version,
      state: core.state,
      pass: core.pass,
      reason: core.reason,
      concurrency: spec.concurrency,
      server_timeout_s: spec.server_timeout_s,
      slow_factor: spec.slow_factor,
      abort: spec.abort,
      update_channel: spec.update_channel,
      channel_updated: spec.update_channel ? (channel?.updated ?? null) : false,
      reboot_slot: spec.reboot_slot,
      counts: core.counts,
      total,
      median_s: m === null ? null : Math.round(m) / 1000,
      eta_s: etaSeconds(core, spec.concurrency, m),
      warnings,
      created_by: spec.created_by,
      created_at: spec.created_at,
      ended_at: core.ended_at,
      version_seq: core.version,
    };
  }

  // ---- RPC from ledgers (through their outboxes) ----

  /**
   * A target's outcome. Only the event for the generation this rollout wrote, on a target still
   * applying, changes anything: duplicates and reordered or late events are answered `changed: false`.
   */
  async targetEvent(e: RolloutEvent): Promise<{ ok: true; changed: boolean }> {
    if (!this.load()) return { ok: true, changed: false };
    const now = Date.now();
    let changed = false;
    this.ctx.storage.transactionSync(() => {
      let t = this.target(e.pass, e.server_id);
      if (!t) return;
      // The outcome may overtake the answer to the write: the ledger's generation is the one written.
      if (t.state === "applying" && t.generation === null && e.outcome !== "removed") {
        t = this.change(t, { type: "applied", generation: e.generation, from_image: null, from_version: null }, now) ?? t;
      }
      const ev: TargetEvent =
        e.outcome === "realized"
          ? { type: "realized", generation: e.generation, at: now }
          : e.outcome === "failed"
            ? { type: "failed", generation: e.generation, message: e.message ?? "failed", at: now }
            : { type: "removed", at: now };
      changed = this.change(t, ev, now) !== null;
      if (changed) {
        this.pump(now);
        this.afterChange();
        this.scheduleSlowCheck();
      }
    });
    if (changed) await this.settle(false);
    return { ok: true, changed };
  }

  /** Cron backstop: re-arms what may have been lost (timers, deliveries) and starts what may start. */
  async redrive(): Promise<{ ok: true; state: RolloutState | null }> {
    const state = this.load();
    if (!state) return { ok: true, state: null };
    const now = Date.now();
    this.ctx.storage.transactionSync(() => {
      if (state.spec.server_timeout_s) {
        const applying = this.ctx.storage.sql
          .exec<{ pass: number; server_id: string; started_at: number }>(
            "SELECT pass, server_id, started_at FROM targets WHERE state = 'applying'",
          )
          .toArray();
        for (const a of applying) {
          this.scheduler.schedule(`timeout:${a.pass}:${a.server_id}`, a.started_at + state.spec.server_timeout_s * 1000, null, { noLaterThan: true });
        }
      }
      this.pump(now);
      this.afterChange();
      this.project();
    });
    await this.settle(true);
    return { ok: true, state: this.load()!.core.state };
  }

  /** A terminal rollout with nothing in flight lets its (fleet, agent) go. */
  private afterChange() {
    const { core } = this.load()!;
    if (quiescent(core) && !this.kv.get<boolean>("unlocked")) {
      this.kv.put("unlocked", true);
      this.outbox.enqueue("unlock", {}, { key: "unlock" });
    }
  }

  // ---- timers ----

  async alarm() {
    await this.scheduler.fire({
      outbox: () => this.outbox.flush(),
      timeout: (_p, name) => {
        const [, pass, serverId] = name.split(":");
        const now = Date.now();
        this.ctx.storage.transactionSync(() => {
          const t = this.target(Number(pass), serverId);
          if (t && this.change(t, { type: "timeout", at: now }, now)) {
            this.pump(now);
            this.afterChange();
          }
        });
      },
      slow: () => this.checkSlow(Date.now()),
      project: () => this.project(),
      pump: () => {
        // The retry time has come for the refused slot requests: all of them may ask again.
        this.ctx.storage.transactionSync(() => {
          this.ctx.storage.sql.exec("UPDATE targets SET not_before = 0 WHERE not_before > 0");
          this.pump(Date.now());
        });
      },
    });
    await this.outbox.flush();
  }

  // ---- outbox effects ----

  private effects(): Record<EffectKind, Effect> {
    const db = () => getDb(this.env.DB);
    return {
      audit: { target: "d1", statements: (e: AuditEvent) => [auditInsertOnce(db(), e)] },
      project: {
        target: "d1",
        statements: () => {
          const state = this.load();
          if (!state) return [];
          const { spec, core } = state;
          const d = db();
          const now = Date.now();
          const rows = this.ctx.storage.sql
            .exec<Row>(`SELECT ${COLS}, dirty FROM targets WHERE dirty > 0 LIMIT ?`, PROJECT_ROWS)
            .toArray();
          this.inFlight = rows.map((r) => ({ pass: r.pass, server_id: r.server_id, dirty: r.dirty }));
          const rolloutRow = {
            id: spec.id,
            fleetId: spec.fleet,
            agent: spec.agent,
            image: spec.image,
            version: spec.version,
            state: core.state,
            pass: core.pass,
            counts: core.counts,
            reason: core.reason,
            createdBy: spec.created_by,
            createdAt: spec.created_at,
            updatedAt: now,
            endedAt: core.ended_at,
          };
          const { id: _id, createdBy: _c, createdAt: _a, fleetId: _f, agent: _g, ...changing } = rolloutRow;
          return [
            d.insert(rollouts).values(rolloutRow).onConflictDoUpdate({ target: rollouts.id, set: changing }),
            ...chunk(rows, ROWS_PER_STATEMENT).map((part) =>
              d
                .insert(rolloutTargets)
                .values(
                  part.map((r) => ({
                    rolloutId: spec.id,
                    pass: r.pass,
                    serverId: r.server_id,
                    hostname: r.hostname,
                    state: r.state,
                    image: r.image,
                    fromImage: r.from_image,
                    generation: r.generation,
                    startedAt: r.started_at,
                    endedAt: r.ended_at,
                    reason: r.reason,
                    updatedAt: now,
                  })),
                )
                .onConflictDoUpdate({
                  target: [rolloutTargets.rolloutId, rolloutTargets.pass, rolloutTargets.serverId],
                  set: {
                    state: sql`excluded.state`,
                    fromImage: sql`excluded.from_image`,
                    generation: sql`excluded.generation`,
                    startedAt: sql`excluded.started_at`,
                    endedAt: sql`excluded.ended_at`,
                    reason: sql`excluded.reason`,
                    updatedAt: sql`excluded.updated_at`,
                  },
                }),
            ),
          ];
        },
        delivered: () => {
          for (const r of this.inFlight) {
            this.ctx.storage.sql.exec("UPDATE targets SET dirty = 0 WHERE pass = ? AND server_id = ? AND dirty = ?", r.pass, r.server_id, r.dirty);
          }
          const more = this.inFlight.length === PROJECT_ROWS;
          this.inFlight = [];
          if (more) this.project();
        },
      },
      unlock: {
        target: "d1",
        statements: () => {
          const { spec } = this.load()!;
          // Only while still terminal: a rollback may have claimed the lock again meanwhile.
          if (!this.kv.get<boolean>("unlocked")) return [];
          const d = db();
          return [
            d
              .delete(rolloutLocks)
              .where(and(eq(rolloutLocks.fleetId, spec.fleet), eq(rolloutLocks.agent, spec.agent), eq(rolloutLocks.rolloutId, spec.id))),
          ];
        },
      },
      lock: {
        target: "d1",
        statements: () => {
          const { spec } = this.load()!;
          if (this.kv.get<boolean>("unlocked")) return [];
          return [db().insert(rolloutLocks).values({ fleetId: spec.fleet, agent: spec.agent, rolloutId: spec.id, createdAt: Date.now() }).onConflictDoNothing()];
        },
      },
      apply: {
        target: "call",
        deliver: async (p: { pass: number; server_id: string }) => {
          const { spec } = this.load()!;
          const t = this.target(p.pass, p.server_id);
          if (!t || t.state !== "applying" || t.generation !== null) return;
          const r = await ledgerOf(this.env, p.server_id).applyRolloutImage({
            rollout_id: spec.id,
            pass: p.pass,
            agent: spec.agent,
            image: t.image,
            version: t.version,
          });
          this.applied(p.pass, p.server_id, r);
        },
      },
      slot: {
        target: "call",
        deliver: async (p: { pass: number; server_id: string }) => {
          const { spec } = this.load()!;
          const t = this.target(p.pass, p.server_id);
          if (!t || t.slot !== "requested") return;
          const settings = await this.fleetSettings(spec.fleet);
          const r = await coordinatorOf(this.env, spec.fleet).acquireRolloutSlot(settings, {
            holder: slotHolderId(spec.id, t.server_id),
            server_id: t.server_id,
            group: t.reboot_group,
            rollout_id: spec.id,
          });
          this.slotAnswer(p.pass, p.server_id, r);
        },
      },
      release: {
        target: "call",
        deliver: async (p: { server_id: string }) => {
          const { spec } = this.load()!;
          await coordinatorOf(this.env, spec.fleet).releaseRolloutSlot(slotHolderId(spec.id, p.server_id), spec.id);
        },
      },
      channel: {
        target: "call",
        deliver: async (p: { to: "rollout" | "previous" }) => {
          const { spec } = this.load()!;
          const record = this.kv.get<ChannelRecord>("channel");
          if (p.to === "rollout") {
            const moved = await moveChannel(this.env, spec.fleet, spec.agent, { image: spec.image, version: spec.version }, `rollout:${spec.id}`);
            this.kv.put("channel", moved satisfies ChannelRecord);
          } else if (record?.updated && record.previous) {
            const from = { image: spec.image, version: spec.version };
            await restoreChannel(this.env, spec.fleet, spec.agent, from, record.previous, `rollout:${spec.id}`);
          }
        },
      },
    };
  }

  private settingsMemo: { at: number; value: FleetSettings } | null = null;

  /** The fleet's settings the coordinator needs, read from D1 at most every 30 s. */
  private async fleetSettings(fleet: string): Promise<FleetSettings> {
    if (this.settingsMemo && Date.now() - this.settingsMemo.at < 30_000) return this.settingsMemo.value;
    const row = await getDb(this.env.DB).query.fleets.findFirst({ where: (f, { eq }) => eq(f.id, fleet) });
    if (!row) throw new Error(`fleet '${fleet}' is gone`);
    this.settingsMemo = { at: Date.now(), value: fleetSettings(row) };
    return this.settingsMemo.value;
  }

  /** The ledger's answer to a write: generation written, or why the target is skipped. */
  private applied(pass: number, serverId: string, r: ApplyOutcome | Failure) {
    const now = Date.now();
    this.ctx.storage.transactionSync(() => {
      const t = this.target(pass, serverId);
      if (!t) return;
      let ev: TargetEvent;
      if (!r.ok) ev = { type: "removed", at: now };
      else if (r.outcome === "applied") ev = { type: "applied", generation: r.generation, from_image: r.from_image, from_version: r.from_version };
      else if (r.outcome === "removed") ev = { type: "removed", at: now };
      else ev = { type: "skip", reason: r.outcome, at: now };
      if (this.change(t, ev, now) && ev.type !== "applied") {
        this.pump(now);
        this.afterChange();
      }
    });
    this.ctx.waitUntil(this.settle(false));
  }

  /** The coordinator's answer to a slot request. */
  private slotAnswer(pass: number, serverId: string, r: { ok: true } | { ok: false; kind: string; value: string }) {
    const now = Date.now();
    this.ctx.storage.transactionSync(() => {
      const t = this.target(pass, serverId);
      if (!t || t.slot !== "requested" || t.state !== "queued") {
        // Skipped meanwhile (cancel, abort): give back what was granted.
        if (r.ok) this.outbox.enqueue("release", { server_id: serverId }, { key: `release:${serverId}` });
        return;
      }
      if (r.ok) {
        this.begin(t, now);
      } else if (r.kind === "unknown_group") {
        this.change(t, { type: "slot_refused" }, now);
        const again = this.target(pass, serverId)!;
        this.change(again, { type: "fail", reason: `no reboot slot: ${r.value}`, at: now }, now);
        this.pump(now);
        this.afterChange();
      } else {
        this.change(t, { type: "slot_refused" }, now);
        this.ctx.storage.sql.exec("UPDATE targets SET not_before = ? WHERE pass = ? AND server_id = ?", now + SLOT_RETRY_MS, pass, serverId);
        this.scheduler.schedule("pump", now + SLOT_RETRY_MS, null, { noLaterThan: true });
        this.event("target.slot_refused", serverId, { kind: r.kind, value: r.value }, now);
      }
    });
    this.ctx.waitUntil(this.settle(false));
  }
}
