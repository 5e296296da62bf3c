/**
 * What waits on a ledger over HTTP: the host's long poll (GET /v1/agent/desired?wait) and the
 * operator's view wait (GET /v1/servers/{id}?wait). Neither waits here: the Worker holds the
 * request and a hibernatable "waiter" socket to the ledger (src/objects/kit/wake.ts), and the
 * ledger, asleep meanwhile, wakes the waiter when what it holds has moved on. This file is the
 * ledger's half of that protocol and the requests the Worker sends for it.
 */
import { attachmentOf, type SocketRoom } from "../objects/kit/sockets";
import { acceptWaiter, wakeWaiters } from "../objects/kit/wake";
import type { LedgerParts } from "./parts";
import { nothingNew, pollAnswer, pollSignature, type PollAnswer } from "./poll";
import { pollHeartbeat } from "./report";
import type { LedgerStore } from "./store";
import { staleTurnAt, viewOf, type ServerView } from "./view";
import { viewTag } from "./view-tag";

const ORIGIN = "https://ledger.internal";
export const WAIT_PATHS = { poll: "/wait/poll", view: "/wait/view" } as const;
const TOKEN_HASH = "X-Token-Hash";
const REPORT_TAG = "X-Report-Tag";

/** null: no such server. */
export type ViewWaitAnswer = { changed: true; etag: string; view: ServerView } | null;

/**
 * What a waiter holds: the poll's answer signature (and, when the poll was the host's heartbeat,
 * when it was heard: the waiter keeps it through the ledger's eviction), with the token digest and
 * generation it asked with, so that its wake carries the answer; or the view's tag. A waiter
 * accepted by older code has no digest: it is woken bare, and the Worker asks again.
 */
type Held =
  | { kind: "poll"; signature: string; heardAt?: number; tokenHash?: string; known?: number }
  | { kind: "view"; etag: string };

const upgrade = (path: string, query: Record<string, string>, headers: Record<string, string> = {}) =>
  new Request(`${ORIGIN}${path}?${new URLSearchParams(query)}`, { headers: { Upgrade: "websocket", ...headers } });

// ---- the Worker's requests ----

/** A host that holds generation `known` (and whose report is `reportTag`, if given) waits for its poll's answer to change. */
export const pollWaitRequest = (tokenHash: string, known: number, reportTag?: string) =>
  upgrade(
    WAIT_PATHS.poll,
    { known: String(known) },
    { [TOKEN_HASH]: tokenHash, ...(reportTag === undefined ? {} : { [REPORT_TAG]: reportTag }) },
  );

/** An operator who holds the view's tag `etag` waits for it to change. */
export const viewWaitRequest = (etag: string) => upgrade(WAIT_PATHS.view, { etag });

// ---- the ledger's side ----

/**
 * Answers at once (unauthorized, a report tag not the stored report's, or a poll answer that
 * differs), else hands over a waiter. A poll naming the host's report is its heartbeat first
 * (./report.ts): `enqueued` when that left something to deliver.
 */
export function openPollWait(
  d: LedgerParts,
  room: SocketRoom,
  request: Request,
): { response: Response; enqueued: boolean } {
  const { store } = d;
  const tokenHash = request.headers.get(TOKEN_HASH) ?? "";
  const known = Number(new URL(request.url).searchParams.get("known"));
  const beat = pollHeartbeat(d, tokenHash, request.headers.get(REPORT_TAG) ?? undefined);
  if (!beat.ok) return { response: Response.json(beat satisfies PollAnswer), enqueued: false };
  if (!nothingNew(store, known))
    return { response: Response.json(pollAnswer(store, tokenHash, known)), enqueued: beat.enqueued };
  // The heartbeat memory holds now (this poll's, or an earlier one's): the waiter keeps it through an eviction.
  const heardAt = store.load()!.report?.received_at;
  return {
    response: acceptWaiter(room, {
      kind: "poll",
      signature: pollSignature(store),
      heardAt,
      tokenHash,
      known,
    } satisfies Held),
    enqueued: beat.enqueued,
  };
}

/**
 * The heartbeat the given poll waiters kept, back into memory when newer than the one there, when
 * the ledger wakes (a waiter closing is still listed then): a ledger evicted while its host polls
 * still knows when it last heard from it.
 */
export function restorePollHeartbeat(store: LedgerStore, waiters: WebSocket[]) {
  store.restoreHeartbeat(
    waiters.map((ws) => {
      const held = attachmentOf<Held>(ws);
      return held.kind === "poll" && held.heardAt !== undefined ? { at: held.heardAt } : null;
    }),
  );
}

/**
 * Answers at once when the view's tag differs from the one held (or there is no such server),
 * else hands over a waiter, asked to look again when the status turns stale with no write.
 */
export function openViewWait(store: LedgerStore, room: SocketRoom, request: Request, now: number): Response {
  const etag = new URL(request.url).searchParams.get("etag") ?? "";
  const view = viewOf(store, now);
  if (!view) return Response.json(null satisfies ViewWaitAnswer);
  const tag = viewTag(view);
  if (tag !== etag) return Response.json({ changed: true, etag: tag, view } satisfies ViewWaitAnswer);
  return acceptWaiter(room, { kind: "view", etag } satisfies Held, staleTurnAt(view));
}

/**
 * After a write: wakes the polls whose answer moved (the token included) and the views whose tag
 * did. A poll's wake carries its answer, decided now with the token checked again (a token
 * revoked meanwhile is answered `unauthorized`), so the Worker does not call the ledger a second
 * time for it; a view's wake is bare (the Worker reads the view again).
 */
export function wakeWaits(store: LedgerStore, room: SocketRoom, now: number) {
  let signature: string | undefined;
  let tag: string | undefined;
  wakeWaiters<Held>(
    room,
    (held) => {
      if (held.kind === "poll") return (signature ??= pollSignature(store)) !== held.signature;
      if (tag === undefined) {
        const view = viewOf(store, now);
        tag = view ? viewTag(view) : "";
      }
      return tag !== held.etag;
    },
    (held) =>
      held.kind === "poll" && held.tokenHash !== undefined && held.known !== undefined
        ? pollAnswer(store, held.tokenHash, held.known)
        : undefined,
  );
}
