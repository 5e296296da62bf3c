/**
 * What waits on a ledger: the host's long poll (GET /v1/agent/desired?wait) and the operator's
 * view wait (GET /v1/servers/{id}?wait). Both park through the kit's Parking, in memory only, and
 * wake from the store's change notification; everything else in the ledger answers at once. Kept
 * in this one file so the waits can move out of the object without touching the rest.
 */
import { Parking } from "../objects/kit/park";
import { nothingNew, pollSignature } from "./poll";
import type { LedgerStore } from "./store";
import { staleTurnAt, viewOf, type ServerView } from "./view";
import { viewTag } from "./view-tag";

export type ViewWaitAnswer = { changed: true; etag: string; view: ServerView } | { changed: false; etag: string } | null;

export class LedgerParks {
  private readonly polls = new Parking<void>();
  private readonly views = new Parking<void>();
  /** The poll signature the parked polls hold (all the same: any change answers them all). */
  private parkedOn = "";

  constructor(private readonly store: LedgerStore) {}

  /** After every store write: a waiting operator re-reads the view; a poll answers if its answer moved. */
  changed() {
    this.views.settleAll();
    if (this.polls.count() && pollSignature(this.store) !== this.parkedOn) this.polls.settleAll();
  }

  /** The host holds the current generation: its poll waits until that changes or `waitMs` passes. */
  async poll(known: number | null, waitMs: number) {
    if (waitMs <= 0 || !nothingNew(this.store, known)) return;
    this.parkedOn = pollSignature(this.store);
    await this.polls.park("poll", waitMs, undefined);
  }

  /**
   * Answers once the view's tag differs from `etag` (at once if it already does), or
   * `changed: false` when `waitMs` runs out; null for no such server. Woken by every write; a
   * status that turns stale without any write is noticed when it does.
   */
  async view(etag: string, waitMs: number): Promise<ViewWaitAnswer> {
    const deadline = Date.now() + waitMs;
    for (;;) {
      const now = Date.now();
      const view = viewOf(this.store, now);
      if (!view) return null;
      const tag = viewTag(view);
      if (tag !== etag) return { changed: true, etag: tag, view };
      if (deadline - now <= 0) return { changed: false, etag: tag };
      const untilStale = Math.max(staleTurnAt(view) - now, 0) || Infinity;
      await this.views.park("view", Math.min(deadline - now, untilStale), undefined);
    }
  }
}
