/**
 * The rollout's long poll (GET /v1/rollouts/{id}?wait) waits in the Worker, not here: the Worker
 * holds the request and a hibernatable waiter socket to the Rollout object
 * (src/objects/kit/wake.ts), and the object, asleep meanwhile, wakes the waiter when its core
 * moves past the version the waiter holds. This file is the object's half and the Worker's request.
 */
import type { SocketRoom } from "../objects/kit/sockets";
import { acceptWaiter, wakeWaiters } from "../objects/kit/wake";
import { quiescent } from "./machine";
import type { RolloutParts } from "./parts";
import { summary, type RolloutSummary } from "./views";

const ORIGIN = "https://rollout.internal";
export const SUMMARY_WAIT_PATH = "/wait/summary";

/** What a waiter holds: the core's version it waits to see moved. */
type Held = { version: number };

/** null: no such rollout. */
export type SummaryWaitAnswer = RolloutSummary | null;

/** The Worker's request: wait for the version to move past `known` (null: past the one now). */
export function summaryWaitRequest(known: number | null) {
  const query = known === null ? "" : `?${new URLSearchParams({ known: String(known) })}`;
  return new Request(`${ORIGIN}${SUMMARY_WAIT_PATH}${query}`, { headers: { Upgrade: "websocket" } });
}

/**
 * Answers at once when there is nothing to wait for (no rollout; one that has ended with nothing
 * in flight changes only by an operator's rollback) or the version already moved past `known`;
 * else hands over a waiter holding the version now.
 */
export function openSummaryWait(p: RolloutParts, room: SocketRoom, request: Request): Response {
  const raw = new URL(request.url).searchParams.get("known");
  const known = raw === null ? null : Number(raw);
  const state = p.store.load();
  if (!state) return Response.json(null satisfies SummaryWaitAnswer);
  if (quiescent(state.core) || (known !== null && known !== state.core.version))
    return Response.json(summary(p) satisfies SummaryWaitAnswer);
  return acceptWaiter(room, { version: state.core.version } satisfies Held);
}

/** After the core moved: wakes the waiters that hold another version. */
export function wakeSummaryWaits(p: RolloutParts, room: SocketRoom) {
  const version = p.store.load()?.core.version;
  wakeWaiters<Held>(room, (held) => held.version !== version);
}
