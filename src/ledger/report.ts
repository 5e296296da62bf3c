/**
 * The host's inventory report: accepted or refused, stored or kept in memory as a heartbeat, and
 * what it means for the index, a decommission, rollouts, refresh and the coordinator.
 */
import { fail, type Failure } from "../objects/kit/result";
import { acknowledgeLifecycle } from "./decommission";
import { project, projectHeartbeat, type ReleasePayload } from "./effects";
import type { LedgerParts } from "./parts";
import { authorized } from "./poll";
import { lastSeenDue } from "./projection";
import { heartbeatPersistMs } from "./quiet";
import type { ServerRecord } from "../model/server/record";
import { answerRefresh } from "./refresh";
import { settleRolloutMarks } from "./rollout-marks";
import { sendHealth, serverHealthEventOf } from "../fleetlock/ledger-side";
import { InventoryReport, type ReportAccepted, type StoredReport } from "../model/server/schemas";
import { refusalOf } from "../http/validation";
import { computeStatus, type ComputedStatus } from "../model/server/status";
import { contentKey } from "../domain/report-content";

export type ReportAnswer = { ok: true; generation: number; computed: ComputedStatus; tag: string } | Failure;

/** An accepted report's answer, as PUT /v1/agent/inventory and the channel's ack give it. */
export const reportAccepted = (
  serverId: string,
  answer: { generation: number; computed: ComputedStatus; tag: string },
): ReportAccepted => ({
  server_id: serverId,
  desired_generation: answer.generation,
  status: answer.computed.status,
  agents: answer.computed.agents,
  report_tag: answer.tag,
});

/**
 * An accepted report's answer as the JSON text PUT /v1/agent/inventory sends: what the ledger
 * hands the Worker, so the answer crosses the object call as one string (a copy of its bytes)
 * rather than a structured clone of nested objects that the Worker would then serialize again.
 * A heartbeat's status is the same object while its content and the desired config are
 * (LedgerStore.heartbeatStatus), so its text is kept beside it, checked against every other input.
 */
export function reportAcceptedText(
  serverId: string,
  answer: { generation: number; computed: ComputedStatus; tag: string },
): string {
  const kept = acceptedTexts.get(answer.computed);
  if (kept && kept.serverId === serverId && kept.generation === answer.generation && kept.tag === answer.tag)
    return kept.text;
  const text = JSON.stringify(reportAccepted(serverId, answer));
  acceptedTexts.set(answer.computed, { serverId, generation: answer.generation, tag: answer.tag, text });
  return text;
}
const acceptedTexts = new WeakMap<
  ComputedStatus,
  { serverId: string; generation: number; tag: string; text: string }
>();

/**
 * The report agentReport receives as JSON text, parsed and checked again in the object: the Worker
 * validated it, but the object answers whatever reaches it (a caller of another version during a
 * deploy, which sends an object; a bug) with a refusal, never a throw (a 500 at the edge) nor a
 * report of another shape stored and projected. The check costs a few microseconds a report.
 */
export function reportOfText(text: unknown): { ok: true; report: InventoryReport } | Failure {
  if (typeof text !== "string") return fail("validation_failed", "the report must be sent as JSON text");
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch {
    return fail("malformed_json", "the report is not valid JSON");
  }
  const parsed = InventoryReport.safeParse(json);
  if (parsed.success) return { ok: true, report: parsed.data };
  const refusal = refusalOf(parsed.error, "json");
  return fail(refusal.code, refusal.message, refusal.details);
}

/**
 * Takes the report of the host holding `record`'s token. `enqueued`: something left for the
 * outbox, to be delivered after the answer; `heartbeat`: the report was kept in memory only (its
 * content is the stored one's). `keepsHeartbeat`: the caller keeps the heartbeat where it outlives
 * the ledger's eviction (the host channel's socket, ./channel.ts), so it is never stored for itself.
 * `viaPoll`: the report is the stored one, named by a poll (pollHeartbeat): it does not answer a
 * pending refresh, which asks for a fresh one.
 */
export function acceptReport(
  d: LedgerParts,
  record: ServerRecord,
  report: InventoryReport,
  opts: { keepsHeartbeat?: boolean; viaPoll?: boolean } = {},
): { answer: ReportAnswer; enqueued: boolean; heartbeat: boolean } {
  const { desired, report: previous, reportKey, persistedAt } = d.store.load()!;
  if (report.generation > desired.generation) {
    const answer = fail(
      "generation_not_issued",
      `report claims generation ${report.generation}, but the newest issued is ${desired.generation}`,
      {
        desired_generation: desired.generation,
      },
    );
    return { answer, enqueued: false, heartbeat: false };
  }
  const now = d.clock();
  const stored: StoredReport = { ...report, received_at: now };
  // Who watches for the host going quiet: its socket on the channel, the ledger's timer over HTTP
  // (newly set: `enqueued`, so the caller arms the alarm).
  let enqueued = false;
  if (opts.keepsHeartbeat) d.quiet.stop();
  else enqueued = d.quiet.watch(now, record.stale_after_s, opts.viaPoll === true);
  // Whether the index may have shown the server stale: a channel host's staleness is exact once it
  // left; an HTTP host's only once its quiet watch fired (the watch is then set anew by this report).
  const staleSeen = opts.keepsHeartbeat === true || enqueued;
  const key = contentKey(stored);
  const unchanged = previous !== undefined && reportKey === key;
  // A poll's heartbeat is stored only while the quiet watch is in doubt (./quiet.ts, QuietMark).
  const memoryOnly =
    opts.keepsHeartbeat === true ||
    (opts.viaPoll
      ? !d.quiet.storesPollHeartbeat(persistedAt ?? 0)
      : now - (persistedAt ?? 0) < heartbeatPersistMs(record.stale_after_s));
  const heartbeat = unchanged && persistedAt !== undefined && memoryOnly;
  if (heartbeat) {
    // Same content as the stored report: only the heartbeat moved. It lives in memory (and in a
    // poll's waiter, or the channel's socket) and a report's is persisted at most every
    // heartbeatPersistMs, so a steady host costs no storage write, and nothing the index shows
    // can have changed.
    d.store.heartbeat(stored);
    if (!opts.viaPoll) answerRefresh(d.store, now);
    if (indexDue(d, now)) {
      projectHeartbeat(d.outbox);
      enqueued = true;
    }
    // Back after a silence long enough to be stale (a channel host keeps its heartbeat in memory
    // however long it was away): the coordinator's fleet-health gates are told. Only then: one
    // comparison per heartbeat, no write.
    if (staleSeen && now - previous.received_at > record.stale_after_s * 1000) {
      if (sendHealth(d, serverHealthEventOf(record, desired, previous, stored, now), desired.generation))
        enqueued = true;
    }
  } else {
    d.store.transaction(() => {
      d.store.save({ report: stored });
      if (!opts.viaPoll) answerRefresh(d.store, now);
      // The first report proves the host is up and talking to us.
      if (record.state === "provisioning") d.store.save({ record: { ...record, state: "active" } });
      if (record.state === "decommissioning") acknowledgeLifecycle(d, record, stored, now);
      if (!unchanged) project(d.outbox);
      else if (indexDue(d, now)) projectHeartbeat(d.outbox);
      if (!unchanged) settleRolloutMarks(d, record.id, stored);
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
        d.outbox.enqueue("release", release, { key: "release" });
      }
      // A new boot, or becoming realized, failed or drifted, or back from stale with the same
      // content: the coordinator's health rules, its fleet-health gates and webhooks, if they can use it.
      sendHealth(d, serverHealthEventOf(record, desired, previous, stored, now, staleSeen), desired.generation);
    });
    enqueued = true;
  }
  const status = () => computeStatus(desired, stored, now, record.stale_after_s * 1000);
  const computed = heartbeat ? d.store.heartbeatStatus(key, desired, status) : status();
  return {
    answer: { ok: true, generation: desired.generation, computed, tag: d.store.tagOf(key) },
    enqueued,
    heartbeat,
  };
}

/**
 * A host's poll, before it is answered: the token must be the server's, and a poll that names the
 * host's report by its tag (X-Report-Tag, from the report's answer) is its heartbeat: the host
 * reconciled since and found nothing to tell, so the poll stands for the report it would have
 * sent, and counts as it would have (a heartbeat, the quiet watch, the index). One request a minute
 * over HTTP instead of a report and a poll. A tag that is not the stored report's refuses the poll:
 * the host reports in full first. `enqueued`: the caller arms the alarm and delivers.
 */
export function pollHeartbeat(
  d: LedgerParts,
  tokenHash: string,
  tag: string | undefined,
): { ok: true; enqueued: boolean } | Failure {
  const record = authorized(d.store, tokenHash);
  if (!record) return fail("unauthorized", "invalid server token");
  if (tag === undefined) return { ok: true, enqueued: false };
  const { report: stored, reportKey } = d.store.load()!;
  if (!stored || reportKey === undefined || d.store.tagOf(reportKey) !== tag) {
    return fail("report_tag_unknown", "X-Report-Tag names no report this server holds: PUT /v1/agent/inventory first");
  }
  const { received_at: _, ...report } = stored;
  return { ok: true, enqueued: acceptReport(d, record, report, { viaPoll: true }).enqueued };
}

/** Whether the index's last_seen is due a refresh (a coarse one, docs/design.md §8; leased while watched). */
function indexDue(d: LedgerParts, now: number) {
  const state = d.store.load();
  if (!state?.report) return false;
  return lastSeenDue(d.store.projected(), now, state.record.stale_after_s, d.leased());
}
