/**
 * Health gates, applied (docs/reboot-safety.md): ./gates.ts decides, this keeps the inputs and tells the queue.
 *
 * Inputs the coordinator does not own are copies with a bounded age, never read on the host path:
 * the fleet's failed and stale servers and its running rollouts come from the D1 index, read by
 * this object's own alarm (GATES_TIMER); an external check is fetched by the same alarm and its
 * answer cached for the check's cache_s. A server's change of health class is pushed by its ledger
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
import { externalCheck } from "./external-check";
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

export class GateKeeper {
  /** When a read was last asked for (real time), so a burst of pre-reboots asks once. */
  private askedAt = 0;

  constructor(
    private readonly store: CoordinatorStore,
    private readonly gates: GateStore,
    /** Its read runs on this timer; inputs' ages are the alarm's real time (`scheduler.now()`). */
    private readonly scheduler: Scheduler,
    private readonly db: () => Db,
    /** Told of every change of a group's first closed gate (the coordinator emits events). */
    private readonly onChange: (c: GateChange) => void,
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
      const seen = i.external[config.external.url];
      if (!seen || now - seen.at > config.external.cache_s * 1000) return true;
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

  /** The alarm's read: the index inputs the fleet's gates need, and each external check whose answer is due. */
  async refresh(fleetId: string, now = this.scheduler.now()): Promise<void> {
    const startedAt = this.scheduler.now();
    const configs = this.configs();
    const inputs = this.gates.inputs();
    const next = { health: inputs.health, rollouts: inputs.rollouts, external: { ...inputs.external } };
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
    const checks = new Map(configs.flatMap((c) => (c.external ? [[c.external.url, c.external] as const] : [])));
    await Promise.all(
      [...checks.values()].map(async (x) => {
        const seen = next.external[x.url];
        if (seen && now - seen.at < x.cache_s * 1000) return;
        next.external[x.url] = { ...(await this.check(x.url, x.timeout_s)), at: now };
      }),
    );
    for (const url of Object.keys(next.external)) if (!checks.has(url)) delete next.external[url];
    // A change pushed while this read was under way may be missing from it: still unknown, read again.
    const changedAt = this.gates.inputs().health?.changed_at;
    if (next.health && changedAt !== undefined && changedAt >= startedAt)
      next.health = { ...next.health, changed_at: changedAt };
    this.gates.saveInputs(next);
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

  private async check(url: string, timeoutS: number): Promise<{ ok: boolean; reachable: boolean; detail: string }> {
    const { ok, reachable, detail } = await externalCheck(this.fetcher, url, timeoutS);
    return { ok, reachable, detail };
  }
}
