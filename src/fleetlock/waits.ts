/**
 * How a pre-reboot waits in the queue: not in the coordinator. The Worker sends the pre-reboot as
 * a WebSocket upgrade; the coordinator decides it in one turn and answers at once (a slot, a
 * refusal) or stores the host's place and hands back a hibernatable waiter socket (./parked.ts).
 * The Worker holds the host's request and that socket while the coordinator sleeps; the decision
 * that answers the host wakes the waiter with the answer. This file is both halves' wire format.
 */
import type { ParkedAnswer } from "./parked";
import type { ClientParams } from "./protocol";

const ORIGIN = "https://coordinator.internal";
export const PRE_REBOOT_WAIT_PATH = "/wait/pre-reboot";
const KEY_HASH = "X-Key-Hash";

/**
 * The Worker's request. `resume`: the request already waited (its waiter closed without an answer
 * or its deadline came): it looks again and parks nothing anew.
 */
export function preRebootWaitRequest(keyHash: string, params: ClientParams, resume: boolean) {
  const query = new URLSearchParams({ id: params.id, group: params.group, ...(resume ? { resume: "1" } : {}) });
  return new Request(`${ORIGIN}${PRE_REBOOT_WAIT_PATH}?${query}`, {
    headers: { Upgrade: "websocket", [KEY_HASH]: keyHash },
  });
}

/** The coordinator's reading of it. */
export function preRebootWaitOf(request: Request): { keyHash: string; params: ClientParams; resume: boolean } {
  const q = new URL(request.url).searchParams;
  return {
    keyHash: request.headers.get(KEY_HASH) ?? "",
    params: { id: q.get("id") ?? "", group: q.get("group") ?? "" },
    resume: q.has("resume"),
  };
}

/** An answer given at once, without a waiter. */
export const answered = (answer: ParkedAnswer) => Response.json(answer);
