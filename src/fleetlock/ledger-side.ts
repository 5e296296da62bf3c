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
 */
import type { Env } from "../env";
import type { ServerRecord, DesiredState } from "../model/server/record";
import type { StoredReport } from "../model/server/schemas";
import { computeStatus } from "../model/server/status";
import type { Effect } from "../objects/kit/outbox";
import { coordinatorOf } from "../objects/stubs";
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

/** The ledger's outbox effect: delivered to the fleet's coordinator, which takes it idempotently. */
export const serverHealthEffect = (env: () => Env): Effect => ({
  target: "call",
  deliver: async (p: ServerHealthEvent) => {
    await coordinatorOf(env(), p.fleet_id).serverHealth(p);
  },
});
