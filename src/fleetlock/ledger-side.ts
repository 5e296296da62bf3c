/**
 * What a server's ledger tells its fleet's coordinator about the server's health (docs/reboot-safety.md), as a
 * pure decision over two reports plus the outbox effect that carries it: the boot it reports from
 * (and whether that boot is new), whether every agent is realized, and a change of status to
 * failed or drifted. The coordinator frees a `healthy_report` slot on it, counts servers rebooted
 * and not yet healthy for the gates, and turns status changes into webhook events.
 *
 * Sent only on a change that matters (a new boot, becoming realized, becoming failed or
 * drifted), never for a heartbeat, so a steady fleet costs nothing here.
 */
import type { Env } from "../env";
import type { DesiredState } from "../ledger/desired";
import type { ServerRecord } from "../model/server/record";
import type { StoredReport } from "../model/server/schemas";
import { computeStatus } from "../ledger/status";
import type { Effect } from "../objects/kit/outbox";
import { coordinatorOf } from "../objects/stubs";

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
): ServerHealthEvent | null {
  const staleMs = record.stale_after_s * 1000;
  const before = previous ? computeStatus(desired, previous, now, staleMs).status : "unknown";
  const after = computeStatus(desired, report, now, staleMs).status;
  const rebootedFrom = previous && previous.boot_id !== report.boot_id ? previous.boot_id : null;
  const becameRealized = after === "realized" && before !== "realized";
  const badNow = after !== before && (after === "failed" || after === "drifted");
  if (!rebootedFrom && !becameRealized && !badNow) return null;
  return {
    fleet_id: record.fleet_id,
    server_id: record.id,
    hostname: record.hostname,
    at: now,
    boot_id: report.boot_id,
    rebooted_from: rebootedFrom,
    realized: after === "realized",
    status: after !== before ? { from: before, to: after } : null,
  };
}

/** The ledger's outbox effect: delivered to the fleet's coordinator, which takes it idempotently. */
export const serverHealthEffect = (env: () => Env): Effect => ({
  target: "call",
  deliver: async (p: ServerHealthEvent) => {
    await coordinatorOf(env(), p.fleet_id).serverHealth(p);
  },
});
