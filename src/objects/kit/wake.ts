/**
 * Waiting outside an object. A caller that must wait for an object's state to change (a long
 * poll) waits in the stateless Worker, billed for CPU and not for wall time, while the object
 * hibernates: it opens a hibernatable WebSocket to the object (a "waiter") and the object sends
 * one message when the state the waiter holds has moved on, then closes it. Nothing in the object
 * runs or holds a timer meanwhile, so it can be evicted; the socket survives that.
 *
 * No lost wake-up: the object checks the caller's state and accepts the waiter in one synchronous
 * turn (its writes cannot interleave), and answers at once, without a socket, when the state has
 * already moved on. A write after that turn finds the waiter and wakes it.
 *
 * A wake may carry the answer itself (`answerWaiters`, or `wakeWaiters` given the answer): where
 * the object decides the answer when it wakes the waiter (a FleetLock grant or refusal, a host's
 * new desired config), the caller needs no second call.
 *
 * Object side: `acceptWaiter` (in `fetch`), `wakeWaiters` (after each write) and `answerWaiters`.
 * Caller side: `waitForWake`. Every wait in an object goes this way: nothing parks a call inside one.
 */
import { attachmentOf, closeSocket, sendJson, type SocketRoom } from "./sockets";

export const WAITER_TAG = "waiter";
const CHANGED = "changed";
/** A time (epoch ms) at which the state may change with no write (a deadline passing): look again then. */
export const LOOK_AGAIN_AT = "X-Look-Again-At";

/**
 * The 101 that hands a waiter to the caller; the attachment is what the waiter holds, `tags` (beside
 * WAITER_TAG) let the object find the waiters of one key again after an eviction.
 */
export function acceptWaiter(
  room: SocketRoom,
  attachment: unknown,
  lookAgainAt?: number,
  tags: string[] = [],
): Response {
  const headers =
    lookAgainAt !== undefined && Number.isFinite(lookAgainAt) ? { [LOOK_AGAIN_AT]: String(lookAgainAt) } : undefined;
  return room.accept([WAITER_TAG, ...tags], attachment, headers).response;
}

/** Wakes (and lets go of) every waiter with the tag, handing each the answer (JSON). */
export function answerWaiters(room: SocketRoom, tag: string, answer: unknown): number {
  const waiters = room.list(tag);
  for (const ws of waiters) {
    sendJson(ws, answer);
    closeSocket(ws, 1000, CHANGED);
  }
  return waiters.length;
}

/**
 * The largest answer a wake carries: a larger one goes as a bare "changed" and the caller asks
 * again (a WebSocket message is limited to 1 MiB; an answer near that is rare, and a second call
 * costs less than the risk of a message refused).
 */
const MAX_WAKE_ANSWER = 256 * 1024;

/**
 * Wakes (and lets go of) every waiter whose state `movedOn` says has changed. With `answer`, the
 * wake carries what the caller would ask for next (decided now, in the turn that moved the
 * state, so nothing older than a second call would get), saving it that call; undefined from it
 * (or an answer too large) wakes with a bare "changed".
 */
export function wakeWaiters<A>(room: SocketRoom, movedOn: (held: A) => boolean, answer?: (held: A) => unknown) {
  for (const ws of room.list(WAITER_TAG)) {
    const held = attachmentOf<A>(ws);
    if (!movedOn(held)) continue;
    const carried = answer?.(held);
    const text = carried === undefined ? undefined : JSON.stringify(carried);
    try {
      ws.send(text !== undefined && text.length <= MAX_WAKE_ANSWER ? text : CHANGED);
    } catch {
      // the caller went away
    }
    closeSocket(ws, 1000, CHANGED);
  }
}

/** The answer a wake carried (answerWaiters), or undefined for a bare "changed". */
function answerIn(data: unknown): unknown {
  if (typeof data !== "string" || data === CHANGED) return undefined;
  try {
    return JSON.parse(data);
  } catch {
    return undefined;
  }
}

export type Wake =
  /** The object answered at once (the state had already moved on, or there was nothing to wait for). */
  | { kind: "answered"; response: Response }
  /** Woken: the state changed; `answer`, when the object sent one (answerWaiters). */
  | { kind: "changed"; answer?: unknown }
  /** The object asked to be looked at again at this time (LOOK_AGAIN_AT). */
  | { kind: "look_again" }
  | { kind: "timeout" }
  /** The socket closed without a wake (the object restarted): look again. */
  | { kind: "lost" }
  /** The caller's own client went away. */
  | { kind: "aborted" };

/**
 * Caller side: sends the waiter's upgrade request (`open`) and waits, until `until` (epoch ms) at
 * the latest, for the object's wake, its LOOK_AGAIN_AT, the socket closing or `signal` (the
 * client hanging up). The socket is closed whatever ends the wait.
 */
export async function waitForWake(open: () => Promise<Response>, until: number, signal?: AbortSignal): Promise<Wake> {
  if (signal?.aborted) return { kind: "aborted" };
  const response = await open();
  const ws = response.webSocket;
  if (response.status !== 101 || !ws) return { kind: "answered", response };
  ws.accept();
  const lookAgainAt = Number(response.headers.get(LOOK_AGAIN_AT) ?? Infinity);
  const lookAgain = lookAgainAt < until;
  return new Promise<Wake>((resolve) => {
    let done = false;
    const finish = (wake: Wake) => {
      if (done) return;
      done = true;
      clearTimeout(timer);
      signal?.removeEventListener("abort", onAbort);
      closeSocket(ws, 1000, "done");
      resolve(wake);
    };
    const onAbort = () => finish({ kind: "aborted" });
    const timer = setTimeout(
      () => finish({ kind: lookAgain ? "look_again" : "timeout" }),
      Math.max(0, (lookAgain ? lookAgainAt : until) - Date.now()),
    );
    ws.addEventListener("message", (event) => finish({ kind: "changed", answer: answerIn(event.data) }));
    ws.addEventListener("close", () => finish({ kind: "lost" }));
    ws.addEventListener("error", () => finish({ kind: "lost" }));
    signal?.addEventListener("abort", onAbort, { once: true });
  });
}
