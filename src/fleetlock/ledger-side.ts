/**
 * What a server's ledger tells its fleet's coordinator about the server's health (docs/reboot-safety.md), as a
 * pure decision over two reports plus the outbox effect that carries it: the boot it reports from
 * (and whether that boot is new), whether every agent is realized, and a change of status to
 * failed or drifted. The coordinator frees a `healthy_report` slot on it, counts servers rebooted
 * and not yet healthy for the gates, and turns status changes into webhook events.
 *
 * Sent only on a change that matters (a new boot, becoming realized, becoming failed or
 * drifted, a change of health class — into or out of failed or stale — that a fleet-health gate
 * counts), never for a heartbeat, so a steady fleet costs nothing here. Going stale is sent by the
 * quiet watch (quietEventOf), coming back by the first report after it.
 *
 * Of those, two kinds reach the coordinator only when it can use them (`healthUse`), since every
 * one of them lands on the one coordinator of the fleet, and a host flapping between drifted and
 * realized would otherwise send it one call a report:
 * - becoming realized again within a boot the coordinator has already heard realized: it acts on
 *   a realized report only for a server rebooted and not yet healthy (its reboot was sent, and
 *   the first realized report of that boot after it is), or for a drift fix's hold, which the
 *   ledger learns of from the fix's write or the hold's own question at its end (`fix_from`:
 *   every realized report goes out until one past that generation has). So a fleet-wide
 *   desired change, whose every host realizes the new generation, costs the coordinator nothing;
 * - becoming drifted, with no reboot and no change of health class: only a webhook asking for
 *   `server.drifted` uses it. The coordinator publishes whether one does in D1 (`fleets.health_watch`,
 *   ./health-watch.ts) before it answers the change that turns it on; the ledger reads that in the
 *   batch of its projection, which the same report enqueued first, and skips the call only on a
 *   read made after the report was accepted (`DriftWatch`). So a webhook subscribed before a
 *   drift gets it.
 */
import type { Env } from "../env";
import type { ServerRecord, DesiredState } from "../model/server/record";
import type { StoredReport } from "../model/server/schemas";
import { computeStatus } from "../model/server/status";
import type { Effect } from "../objects/kit/outbox";
import type { Db } from "../db/client";
import { fleets } from "../db/schema";
import { eq, getTableName } from "drizzle-orm";
import type { BoundReturning } from "../db/bound";
import { coordinatorOf, lane } from "../objects/stubs";
import { healthClass } from "./gates";

export interface ServerHealthEvent {
  fleet_id: string;
  server_id: string;
  hostname: string;
  /** When the ledger took the report (ms). */
  at: number;
  boot_id: string;
  /** The previous report's boot, when this report is the first from a new boot. */
  rebooted_from: string | null;
  /** Every desired agent reported running at its image, at the desired generation, no errors. */
  realized: boolean;
  /**
   * The desired generation when the ledger took the report: what `realized` is of. A drift fix's
   * hold frees only on a realized report of its written generation or later (./fix-budget.ts).
   * Absent from events enqueued by code older than the field; those free no hold by themselves.
   */
  generation?: number;
  /** The computed status before and after, when it changed. */
  status: { from: string; to: string } | null;
}

/** The event a changed report sends to the coordinator, or null when nothing it cares about changed. */
export function serverHealthEventOf(
  record: ServerRecord,
  desired: DesiredState,
  previous: StoredReport | undefined,
  report: StoredReport,
  now: number,
  /**
   * Whether the index could show the server stale before this report: its quiet watch had found
   * it silent, or it was a channel host (exact once it left). Otherwise the previous report counts
   * as of its own time, so a host back within the watch's grace pushes nothing the index never showed.
   */
  staleSeen = true,
): ServerHealthEvent | null {
  const staleMs = record.stale_after_s * 1000;
  const before = previous
    ? computeStatus(desired, previous, staleSeen ? now : previous.received_at, staleMs).status
    : "unknown";
  const after = computeStatus(desired, report, now, staleMs).status;
  const rebootedFrom = previous && previous.boot_id !== report.boot_id ? previous.boot_id : null;
  const becameRealized = after === "realized" && before !== "realized";
  const badNow = after !== before && (after === "failed" || after === "drifted");
  // Into or out of failed or stale: what a fleet-health gate counts (the coordinator reads it again).
  const classChanged = healthClass(before) !== healthClass(after);
  if (!rebootedFrom && !becameRealized && !badNow && !classChanged) return null;
  return {
    fleet_id: record.fleet_id,
    server_id: record.id,
    hostname: record.hostname,
    at: now,
    boot_id: report.boot_id,
    rebooted_from: rebootedFrom,
    realized: after === "realized",
    generation: desired.generation,
    status: after !== before ? { from: before, to: after } : null,
  };
}

/**
 * The quiet watch found the HTTP host silent (src/ledger/quiet.ts): the server is stale now, a
 * change of its health class no report carries, so the watch sends it. Null if it was stale already.
 */
export function quietEventOf(
  record: ServerRecord,
  desired: DesiredState,
  report: StoredReport,
  now: number,
): ServerHealthEvent | null {
  const staleMs = record.stale_after_s * 1000;
  const before = computeStatus(desired, report, report.received_at, staleMs).status;
  const after = computeStatus(desired, report, now, staleMs).status;
  if (healthClass(before) === healthClass(after)) return null;
  return {
    fleet_id: record.fleet_id,
    server_id: record.id,
    hostname: record.hostname,
    at: now,
    boot_id: report.boot_id,
    rebooted_from: null,
    realized: false,
    generation: desired.generation,
    status: { from: before, to: after },
  };
}

/**
 * What the ledger last sent the coordinator of its server's realization: the boot of its last
 * realized event, and `fix_from` while a drift fix's hold may wait on a realized report past
 * that desired generation (the fix's write, src/ledger/planning.ts, or the hold's question).
 */
export interface HealthSent {
  boot_id: string | null;
  fix_from?: number;
}

/**
 * Who needs an event: "coordinator", its rules (a reboot, a change of health class, a realized
 * report it may be waiting for); "webhooks", only a webhook asking for `server.drifted`; null,
 * no one (a realized report the coordinator has heard for this boot already, no fix's hold waiting).
 */
export type HealthUse = "coordinator" | "webhooks" | null;

/** Pure: who an event is for, given what was sent before (see the module's comment). */
export function healthUse(e: ServerHealthEvent, sent: HealthSent | null): HealthUse {
  if (e.rebooted_from) return "coordinator";
  if (e.status && healthClass(e.status.from) !== healthClass(e.status.to)) return "coordinator";
  if (e.realized) {
    const heard = sent !== null && sent.fix_from === undefined && sent.boot_id === e.boot_id;
    return heard ? null : "coordinator";
  }
  if (e.status?.to === "drifted") return "webhooks";
  // Not produced by serverHealthEventOf; sent as before should it ever be.
  return "coordinator";
}

/** Whether the coordinator can use the event only through a webhook asking for `server.drifted`. */
export const driftOnly = (e: ServerHealthEvent) => healthUse(e, null) === "webhooks";

/** The outbox the ledger enqueues health events on, and the store keeping what it sent. */
interface HealthSink {
  outbox: { enqueue(kind: "server_health", payload: ServerHealthEvent): void };
  store: { healthSent(): HealthSent | null; setHealthSent(s: HealthSent): void; onCommit(fn: () => void): void };
  driftWatch: DriftWatch;
}

/**
 * Enqueues a health event if anyone may use it; true when it did. Called in the storage turn
 * that stores the report, so what it records of a realized event commits with the event; its
 * memory (the store's of what was sent, the drift watch's of what waits) moves only once that
 * turn committed, so a turn that throws leaves memory as storage is.
 */
export function sendHealth(d: HealthSink, e: ServerHealthEvent | null, generation: number): boolean {
  if (!e) return false;
  const sent = d.store.healthSent();
  const use = healthUse(e, sent);
  if (use === null) return false;
  if (e.realized) {
    // A fix's hold past whose generation this report is: released by it (src/fleetlock/fix-budget.ts).
    const fixFrom = sent?.fix_from !== undefined && generation <= sent.fix_from ? sent.fix_from : undefined;
    d.store.setHealthSent({ boot_id: e.boot_id, ...(fixFrom !== undefined ? { fix_from: fixFrom } : {}) });
  }
  d.outbox.enqueue("server_health", e);
  // Only an event stored for good waits on a read: one rolled back with its turn never settles.
  if (use === "webhooks") d.store.onCommit(() => d.driftWatch.accepted(e.at));
  return true;
}

/**
 * A drift fix's hold waits on a realized report past `generation` (its write reached the ledger,
 * or the hold asked at its end): every realized report goes out until one past it has.
 */
export function fixHoldAnnounced(store: HealthSink["store"], generation: number) {
  const sent = store.healthSent();
  const from = Math.min(sent?.fix_from ?? generation, generation);
  store.setHealthSent({ boot_id: sent?.boot_id ?? null, fix_from: from });
}

/**
 * The ledger's memory of whether its fleet wants drift-only events, and of which reads are fresh
 * enough to skip one. In memory only: after an eviction nothing is known, and every event is sent.
 * Ordered by a counter, not the clock, so a read counts only if it was built after the report.
 */
export class DriftWatch {
  private turn = 0;
  /** Drift-only events accepted and not yet delivered, by their time: the turn they were accepted in. */
  private readonly pending = new Map<number, number>();
  private read: { watched: boolean; turn: number } | null = null;

  accepted(at: number) {
    this.pending.set(at, ++this.turn);
  }

  /** Whether a projection about to be built should read the fleet's watch (an event waits on it). */
  wanted(): boolean {
    return this.pending.size > 0;
  }

  /** A read about to be sent; the answer is handed to the returned function. */
  reading(): (watched: boolean) => void {
    const turn = ++this.turn;
    return (watched) => {
      if (!this.read || this.read.turn < turn) this.read = { watched, turn };
    };
  }

  /** Whether the event at `at` may be skipped: a read built after it found no one watching. */
  unwatched(at: number): boolean {
    const turn = this.pending.get(at);
    return turn !== undefined && this.read !== null && this.read.turn > turn && !this.read.watched;
  }

  settled(at: number) {
    this.pending.delete(at);
  }
}

/** The read of the fleet's watch, for the projection's batch (./health-watch.ts writes it). */
export const driftWatchRead = (db: Db, fleetId: string) =>
  db.select({ watch: fleets.healthWatch }).from(fleets).where(eq(fleets.id, fleetId));

/**
 * The same read as columns a statement on the server's row returns (RETURNING): the projection's
 * batch carries it on the server row's write when it has one, a statement less than the read.
 */
export const driftWatchReturning = (fleetId: string): BoundReturning => ({
  name: "watch",
  text: WATCH_READ,
  values: [fleetId],
});
const WATCH_READ = `SELECT "${fleets.healthWatch.name}" FROM "${getTableName(fleets)}" WHERE "${getTableName(fleets)}"."${fleets.id.name}" = ?`;

/** The read's answer: watched unless D1 says 0 (a deleted fleet's ledger sends, and is refused as before). */
export const watchedIn = (rows: unknown) => !(Array.isArray(rows) && rows.length === 1 && rows[0]?.watch === 0);

/**
 * The ledger's outbox effect: delivered to the fleet's coordinator, which takes it idempotently.
 * A drift-only event that a fresh read found unwatched is taken as delivered without the call.
 */
export const serverHealthEffect = (env: () => Env, watch: DriftWatch): Effect => ({
  target: "call",
  lane: (p: ServerHealthEvent) => lane.coordinator(p.fleet_id),
  deliver: async (p: ServerHealthEvent) => {
    if (!(driftOnly(p) && watch.unwatched(p.at))) await coordinatorOf(env(), p.fleet_id).serverHealth(p);
  },
  delivered: (p: ServerHealthEvent) => watch.settled(p.at),
});
