/**
 * A host's own calls (/v1/agent/*), answered by its server's ledger alone: the ledger checks the
 * token's digest, so the hot path (desired polls, reports) never reads D1.
 */
import type { Env } from "../env";
import { channelRequest } from "../ledger/channel";
import type { PollAnswer } from "../ledger/poll";
import type { InventoryReport } from "../model/server/schemas";
import { pollWaitRequest } from "../ledger/waits";
import { errorOf, unwrap, type Failure } from "../objects/kit/result";
import { waitForWake } from "../objects/kit/wake";
import { ledgerOf } from "../objects/stubs";

type Host = { serverId: string; tokenHash: string };

/**
 * The desired config; with `heldGeneration` current, waits up to `waitMs` for a new one. With
 * `reportTag`, the poll is also the host's heartbeat (src/ledger/report.ts, pollHeartbeat). The wait
 * is held here, in the Worker, while the ledger sleeps: it wakes this request when the answer
 * changes (a new generation, a refresh, the token revoked), with the answer decided then, the
 * token checked again (src/ledger/waits.ts); a bare wake (a ledger running older code, an answer
 * too large to carry) makes this ask once more. When the time runs out with no wake, nothing the
 * answer depends on has changed, so it is 304 without asking. `signal`: the client hung up.
 */
export async function desiredForHost(
  env: Env,
  host: Host,
  heldGeneration: number | null,
  waitMs: number,
  signal?: AbortSignal,
  reportTag?: string,
) {
  const ledger = ledgerOf(env, host.serverId);
  if (waitMs <= 0 || heldGeneration === null)
    return unwrap(await ledger.agentDesired(host.tokenHash, heldGeneration, reportTag));
  const until = Date.now() + waitMs;
  const unchanged = { ok: true, notModified: true, generation: heldGeneration } as const;
  // The heartbeat a report tag stands for is counted once, by the first look.
  let tag = reportTag;
  for (;;) {
    const request = pollWaitRequest(host.tokenHash, heldGeneration, tag);
    tag = undefined;
    const wake = await waitForWake(() => ledger.fetch(request), until, signal);
    if (wake.kind === "answered") return unwrap((await wake.response.json()) as PollAnswer);
    if (wake.kind === "timeout" || wake.kind === "aborted") return unchanged;
    const carried = wake.kind === "changed" ? (wake.answer as PollAnswer | undefined) : undefined;
    const answer = unwrap(carried ?? (await ledger.agentDesired(host.tokenHash, heldGeneration)));
    if (!answer.notModified || Date.now() >= until) return answer;
  }
}

/**
 * Stores what the host reports it runs; answers the status computed from it, as the JSON text of
 * a ReportAccepted (the ledger's agentReport: both cross the object call as strings).
 */
export async function reportFromHost(env: Env, host: Host, report: InventoryReport): Promise<string> {
  return unwrap(await ledgerOf(env, host.serverId).agentReport(host.tokenHash, JSON.stringify(report))).accepted;
}

/**
 * Hands a host's WebSocket upgrade to its ledger (src/ledger/channel.ts): the 101 that opens the
 * channel, or the ledger's refusal thrown as an error.
 */
export async function openChannel(
  env: Env,
  host: Host,
  heldGeneration: number | null,
  offeredProtocols: string[],
): Promise<Response> {
  const res = await ledgerOf(env, host.serverId).fetch(
    channelRequest(host.tokenHash, heldGeneration, offeredProtocols),
  );
  if (res.status === 101) return res;
  throw errorOf((await res.json()) as Failure);
}
