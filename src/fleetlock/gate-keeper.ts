/**
 * Health gates, applied (docs/reboot-safety.md): ./gates.ts decides, this keeps the inputs and tells the queue.
 *
 * Inputs the coordinator does not own are copies with a bounded age, never read on the host path:
 * the fleet's failed and stale servers and its running rollouts come from the D1 index, read by
 * this object's own alarm (GATES_TIMER); an external check is asked for by the same alarm, fetched in
 * the background (bounded by its timeout_s), and its answer comes back as an event of its own
 * (`answered`, a turn that stores it and drains the queues), cached for the check's cache_s: the
 * alarm, and the outbox and timers behind it, never wait on the outsider. A server's change of health class is pushed by its ledger
 * (./ledger-side.ts, ./health.ts): the fleet-health copy is then unknown until read again, and the
 * read is asked for at once (healthChanged). The copy's age bound covers only what nobody pushes.
 * Reading is demand-driven: a pre-reboot that finds an input old (INDEX_REFRESH_MS) asks for a
 * read; one that finds it unknown (past INDEX_INPUT_MAX_AGE_MS, or changed) parks for up to
 * READ_WAIT_S and is answered once the read is in; while hosts wait behind a gate the alarm reads
 * again every INDEX_REFRESH_MS (or cache_s). An idle fleet costs nothing.
 */
import { and, count, eq, inArray, ne } from "drizzle-orm";
import type { Db } from "../db/client";
import { rollouts, servers } from "../db/schema";
import type { Scheduler } from "../objects/kit/scheduler";
import { statusAt } from "../model/server/staleness";
import { externalCheck, type ExternalAnswer } from "./external-check";
import type { GateStore } from "./gate-store";
import {
  evaluate,
  firstClosed,
  holdEnds,
  INDEX_REFRESH_MS,
  needsIndex,
  READ_WAIT_S,
  type GateConfig,
  type GateVerdict,
  type Hold,
} from "./gates";
import type { Closure } from "./queue";
import type { GroupState } from "./semaphore";
import type { CoordinatorStore } from "./store";

export const GATES_TIMER = "gates";

/** What the gate keeper reports when a group's first closed gate changes (events, audit). */
export type GateChange = { group: string; closed: GateVerdict | null; was: GroupState["gate"] };

/**
 * What the keeper hands its external checks to: the object keeps them alive (ctx.waitUntil), and
 * is told once an answer is stored, in a turn of its own (../fleetlock/gate-rules.ts drains the queues).
 */
export interface ExternalChecks {
  background(work: Promise<unknown>): void;
  answered(): Promise<void>;
}

/**
 * Past its timeout_s, a check still under way is asked for again: a fetch that outlives its own
 * abort signal (or whose answer was lost) does not keep the gate without an answer. A later answer
 * of the earlier call still counts if it is the newest.
 */
const ASK_AGAIN_SLACK_MS = 5_000;

export class GateKeeper {
  /** When a read was last asked for (real time), so a burst of pre-reboots asks once. */
  private askedAt = 0;
  /** External checks under way, by URL: when each was asked (real time). Memory only: lost with the object, like the fetch. */
  private readonly asking = new Map<string, number>();
  /** The checks' background work, until their answers are taken. */
  private readonly pending = new Set<Promise<void>>();

  constructor(
    private readonly store: CoordinatorStore,
    private readonly gates: GateStore,
    /** Its read runs on this timer; inputs' ages are the alarm's real time (`scheduler.now()`). */
    private readonly scheduler: Scheduler,
    private readonly db: () => Db,
    /** Told of every change of a group's first closed gate (the coordinator emits events). */
    private readonly onChange: (c: GateChange) => void,
    private readonly external: ExternalChecks,
    private readonly fetcher: (url: string, init: RequestInit) => Promise<Response> = (u, i) => fetch(u, i),
  ) {}

  /** The gates that apply to a group: its own configuration, or the fleet's default; both holds. */
  effective(g: GroupState): { config: GateConfig | null; holds: (Hold | null | undefined)[] } {
    const fleet = this.gates.fleet();
    return { config: g.gates ?? fleet?.config ?? null, holds: [fleet?.hold, g.hold] };
  }

  verdicts(g: GroupState, now: number): GateVerdict[] {
    const { config, holds } = this.effective(g);
    return evaluate(config, holds, this.gates.inputs(), now);
  }

  /** The first closed gate of the group as hosts are told it, or null; asks for a read if an input is old. */
  closed(g: GroupState, now: number): Closure | null {
    const { config } = this.effective(g);
    if (config && this.stale(config, this.scheduler.now())) this.askForRead();
    const v = firstClosed(this.verdicts(g, now));
    if (!v) return null;
    // An input being read: the host waits for it (parked) rather than being answered without it.
    return v.reading ? { kind: v.kind, value: v.reason, wait_s: READ_WAIT_S } : { kind: v.kind, value: v.reason };
  }

  /**
   * A server's ledger told us its health class changed (failed, stale, or back): the fleet-health
   * copy is unknown from now until read again, and the read is asked for at once. Nothing to do
   * when no gate counts fleet health. Stored, so a restart still treats the copy as unknown.
   */
  healthChanged(now = this.scheduler.now()) {
    if (!this.configs().some((cfg) => cfg.fleet_health)) return;
    const i = this.gates.inputs();
    if (i.health) this.gates.saveInputs({ ...i, health: { ...i.health, changed_at: now } });
    this.askForRead(true);
  }

  /** After a gate setting changed: asks for a read if any gate now needs an input not at hand. */
  prime() {
    const now = this.scheduler.now();
    if (this.configs().some((cfg) => this.stale(cfg, now))) this.askForRead(true);
  }

  /** Records a change of the group's first closed gate (stored on the group, reported once). */
  note(name: string, g: GroupState, now: number): GroupState {
    const v = firstClosed(this.verdicts(g, now));
    const was = g.gate ?? null;
    if ((v?.gate ?? null) === (was?.gate ?? null)) return g;
    const next: GroupState = { ...g, gate: v ? { gate: v.gate, kind: v.kind, reason: v.reason, since: now } : null };
    this.store.saveGroup(name, next);
    this.onChange({ group: name, closed: v, was });
    return next;
  }

  /** When the group must be looked at again with no request to prompt it: a hold lifting. */
  wakeAt(g: GroupState, now: number): number | null {
    return holdEnds(this.effective(g).holds, now);
  }

  private stale(config: GateConfig, now: number): boolean {
    const i = this.gates.inputs();
    const old = (at: number | undefined) => at === undefined || now - at > INDEX_REFRESH_MS;
    if (config.fleet_health && (old(i.health?.at) || i.health?.changed_at !== undefined)) return true;
    if (config.rollouts && old(i.rollouts?.at)) return true;
    if (config.external) {
      const x = config.external;
      const seen = i.external[x.url];
      // A check under way answers by itself: the host path does not wake the alarm for it again.
      if ((!seen || now - seen.at > x.cache_s * 1000) && !this.underWay(x.url, x.timeout_s, now)) return true;
    }
    return false;
  }

  /** Asks the alarm to read the inputs now (from the host path, at most once per second while that read is pending). */
  private askForRead(always = false) {
    const now = this.scheduler.now();
    if (!always && now - this.askedAt < 1_000 && this.scheduler.dueAt(GATES_TIMER) !== null) return;
    this.askedAt = now;
    this.scheduler.schedule(GATES_TIMER, now, null, { noLaterThan: true });
    void this.scheduler.arm().catch(() => undefined);
  }

  /**
   * The alarm's read: the index inputs the fleet's gates need (D1, this deployment's own), and the
   * external checks whose answer is due asked for in the background: their answers come back
   * through `answered`, never awaited here.
   */
  async refresh(fleetId: string, now = this.scheduler.now()): Promise<void> {
    const startedAt = this.scheduler.now();
    const configs = this.configs();
    const inputs = this.gates.inputs();
    const next = { health: inputs.health, rollouts: inputs.rollouts };
    if (configs.some(needsIndex)) {
      const db = this.db();
      if (configs.some((c) => c.fleet_health)) {
        const rows = await db
          .select({ status: statusAt(now), n: count() })
          .from(servers)
          .where(and(eq(servers.fleetId, fleetId), ne(servers.state, "removed")))
          .groupBy(statusAt(now));
        const n = (s: string) => rows.find((r) => r.status === s)?.n ?? 0;
        next.health = { failed: n("failed"), stale: n("stale"), total: rows.reduce((a, r) => a + r.n, 0), at: now };
      }
      if (configs.some((c) => c.rollouts)) {
        const [row] = await db
          .select({ n: count() })
          .from(rollouts)
          .where(and(eq(rollouts.fleetId, fleetId), inArray(rollouts.state, ["running", "rolling_back"])));
        next.rollouts = { running: row?.n ?? 0, at: now };
      }
    }
    // The answers as they are now: one may have come in while the index was read.
    const external = { ...this.gates.inputs().external };
    const checks = this.externalChecks(configs);
    for (const url of Object.keys(external)) if (!checks.has(url)) delete external[url];
    for (const x of checks.values()) {
      const seen = external[x.url];
      if (!seen || now - seen.at >= x.cache_s * 1000) this.ask(x.url, x.timeout_s);
    }
    // A change pushed while this read was under way may be missing from it: still unknown, read again.
    const changedAt = this.gates.inputs().health?.changed_at;
    if (next.health && changedAt !== undefined && changedAt >= startedAt)
      next.health = { ...next.health, changed_at: changedAt };
    this.gates.saveInputs({ ...next, external });
  }

  /**
   * When the keeper must read again: at once if a health change came in during the last read;
   * while hosts wait behind a gate that reads an input, every INDEX_REFRESH_MS (or cache_s); else null.
   */
  nextRead(waiting: boolean, now = this.scheduler.now()): number | null {
    if (this.gates.inputs().health?.changed_at !== undefined && this.configs().some((c) => c.fleet_health)) return now;
    if (!waiting) return null;
    let at = Infinity;
    for (const c of this.configs()) {
      if (needsIndex(c)) at = Math.min(at, now + INDEX_REFRESH_MS);
      if (c.external) at = Math.min(at, now + c.external.cache_s * 1000);
    }
    return at === Infinity ? null : at;
  }

  private configs(): GateConfig[] {
    const out: GateConfig[] = [];
    for (const [, g] of this.store.groups()) {
      const c = this.effective(g).config;
      if (c) out.push(c);
    }
    const fleet = this.gates.fleet()?.config;
    if (fleet) out.push(fleet);
    return out;
  }

  private externalChecks(configs = this.configs()) {
    return new Map(configs.flatMap((c) => (c.external ? [[c.external.url, c.external] as const] : [])));
  }

  /** Whether a check of the URL is under way and within its time. */
  private underWay(url: string, timeoutS: number, now: number): boolean {
    const askedAt = this.asking.get(url);
    return askedAt !== undefined && now - askedAt < timeoutS * 1000 + ASK_AGAIN_SLACK_MS;
  }

  /** Starts one external check in the background, unless one for the URL is under way. */
  private ask(url: string, timeoutS: number) {
    const askedAt = this.scheduler.now();
    if (this.underWay(url, timeoutS, askedAt)) return;
    this.asking.set(url, askedAt);
    const work = externalCheck(this.fetcher, url, timeoutS)
      .then((answer) => this.answered(url, askedAt, answer))
      .catch((err) => {
        // Asked again by the next read (the input is still old); nothing waits on this one.
        if (this.asking.get(url) === askedAt) this.asking.delete(url);
        console.error(JSON.stringify({ msg: "gate check answer not taken", url, error: String(err) }));
      })
      .finally(() => this.pending.delete(work));
    this.pending.add(work);
    this.external.background(work);
  }

  /**
   * An external check's answer, in a turn of its own: stored (as of when it came) if a gate still
   * asks for the URL, then the queues are told (a gate may have opened or closed).
   */
  private async answered(url: string, askedAt: number, answer: ExternalAnswer) {
    if (this.asking.get(url) === askedAt) this.asking.delete(url);
    // The fleet was deleted meanwhile (its storage wiped, read again as empty): nothing to store.
    if (!this.store.config || !this.externalChecks().has(url)) return;
    const inputs = this.gates.inputs();
    const { ok, reachable, detail } = answer;
    this.gates.saveInputs({
      health: inputs.health,
      rollouts: inputs.rollouts,
      external: { ...inputs.external, [url]: { ok, reachable, detail, at: this.scheduler.now() } },
    });
    await this.external.answered();
  }

  /** Waits for the external checks under way (tests look after the answers are in). */
  async idle(): Promise<void> {
    while (this.pending.size) await Promise.allSettled(this.pending);
  }
}
