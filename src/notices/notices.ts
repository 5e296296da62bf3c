/**
 * The console's live notices, raised by the owners where a change a page shows is committed: a
 * ledger when its projection writes changed rows, the coordinator with its grants, releases, queue,
 * gates and group changes, a rollout with its projection, and the D1-only services after their
 * write. An object raises one through its outbox (the `feed` effect, keyed so one notice per object
 * is pending at a time); a service calls notifyFeed itself. Delivery is at least once, and a lost
 * or repeated notice does not matter: a page re-fetches all it shows on any notice.
 *
 * Coalescing, per fleet and isolate: at most one call to the fleet's ConsoleFeed per THROTTLE_MS.
 * A notice arriving inside the window becomes the window's trailing notice (its outbox keeps it and
 * tries again when the window ends: NotYet, no timer held in memory), or — when another owner's
 * notice already holds that place — is dropped: the trailing call goes after this change was
 * committed, so the page re-fetches it. A busy fleet costs its feed about 2 calls a second.
 */
import type { Env } from "../env";
import { NotYet, type Effect } from "../objects/kit/outbox";
import { lane } from "../objects/stubs";
import type { FeedNotice } from "./feed-fanout";

export const THROTTLE_MS = 500;
/** A trailing notice promised by an object that never came back (evicted) is not waited for longer. */
const PROMISE_GRACE_MS = 2_000;

export interface NoticeInput {
  fleet: string;
  kind: string;
  ids?: string[];
  /** Who raises it (`server:<id>`, `coordinator`, `rollout:<id>`, a service): the holder of a promised trailing notice. */
  from: string;
}

const feedOf = (env: Env, fleet: string) => env.FEED.get(env.FEED.idFromName(fleet));

const windows = new Map<string, { last: number; promisedUntil: number; promisedBy: string }>();

function windowOf(fleet: string) {
  let w = windows.get(fleet);
  if (!w) {
    if (windows.size > 4096) windows.clear();
    windows.set(fleet, (w = { last: 0, promisedUntil: 0, promisedBy: "" }));
  }
  return w;
}

/**
 * Tells the fleet's feed now, or answers when it may (`later`: the caller keeps the notice until
 * then), or not at all (`covered`: a trailing notice already stands for this one).
 */
export async function notifyFeed(
  env: Env,
  n: NoticeInput,
  now = Date.now(),
): Promise<"sent" | "covered" | { later: number }> {
  const w = windowOf(n.fleet);
  const opens = w.last + THROTTLE_MS;
  if (now < opens) {
    if (now < w.promisedUntil && w.promisedBy !== n.from) return "covered";
    w.promisedUntil = opens + PROMISE_GRACE_MS;
    w.promisedBy = n.from;
    return { later: opens };
  }
  w.last = now;
  w.promisedUntil = 0;
  const body: FeedNotice = { kind: n.kind, ids: (n.ids ?? []).slice(0, 20), at: new Date(now).toISOString() };
  await feedOf(env, n.fleet).notify(body);
  return "sent";
}

/**
 * Whether `notifyFeed` would answer `covered` now: inside the window, another owner's trailing
 * notice is promised, and it goes after this moment. An owner whose change is committed may then
 * skip storing its notice (and the rows that costs) rather than store it only to have it dropped.
 */
export function noticeCovered(n: NoticeInput, now = Date.now()): boolean {
  const w = windows.get(n.fleet);
  return w !== undefined && now < w.last + THROTTLE_MS && now < w.promisedUntil && w.promisedBy !== n.from;
}

/**
 * How often a service's notice is tried when the feed's call fails, and the first pause between
 * tries (doubling): a feed restarting or briefly unreachable still hears of the change, and one
 * that stays down costs the request's background work a few seconds (about 4 s), not its whole
 * allowance.
 */
const SERVICE_TRIES = 5;
const SERVICE_RETRY_MS = 250;

const pause = (ms: number) => new Promise((res) => setTimeout(res, ms));

/**
 * From a service that changed only D1: told at once, or dropped when covered. It has nothing
 * durable to keep the notice in, so a failed call is tried again, a bounded number of times, in
 * the request's background work (no object keeps anything for it). A Worker that dies meanwhile
 * loses it: the change's audit row brings it again, from the cron's audit tick
 * (src/audit/events.service.ts).
 */
export async function noticeNow(env: Env, n: NoticeInput) {
  // Asked to come back later, it has promised the trailing notice other owners' now count on
  // (they answer `covered`): it must send it, so it comes back until sent or covered. Each window's
  // end is near (under THROTTLE_MS); this request's background work waits for it.
  for (let failed = 0; ;) {
    let r: Awaited<ReturnType<typeof notifyFeed>>;
    try {
      r = await notifyFeed(env, n);
    } catch (e) {
      if (++failed >= SERVICE_TRIES) {
        console.warn(`console notice ${n.kind} for fleet ${n.fleet} not delivered after ${failed} tries: ${String(e)}`);
        return;
      }
      await pause(SERVICE_RETRY_MS * 2 ** (failed - 1));
      continue;
    }
    if (typeof r !== "object") return;
    await pause(Math.max(0, r.later - Date.now()));
  }
}

/** After a service's D1 write (fleet intent, fleet settings): the fleet's open pages are told, after the answer. */
export function pagesChanged(env: Env, ctx: { waitUntil(p: Promise<unknown>): void }, fleet: string, kind: string) {
  ctx.waitUntil(noticeNow(env, { fleet, kind, ids: [fleet], from: `service:${kind}` }));
}

/** The owners' outbox effect: delivered to the fleet's ConsoleFeed, coalesced as above. */
export const feedEffect = (env: () => Env): Effect => ({
  target: "call",
  lane: (n: NoticeInput) => lane.feed(n.fleet),
  deliver: async (n: NoticeInput) => {
    const r = await notifyFeed(env(), n);
    if (typeof r === "object") throw new NotYet(r.later);
  },
});
