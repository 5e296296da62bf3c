/**
 * Refresh (docs/operator-guide.md): an operator asks the host to report again now. The request is pending until
 * the first report after it answers it; while it is pending, the host's poll answers 200 even to a
 * current If-None-Match, which is how the host learns of it.
 */
import { fail, type Result } from "../objects/kit/result";
import { audit } from "./effects";
import type { LedgerParts } from "./parts";
import type { LedgerStore, RefreshState } from "./store";

export function pendingRefresh(store: LedgerStore): RefreshState | null {
  const r = store.refresh();
  return r && r.answered_at === null ? r : null;
}

/** The first report after a refresh request answers it. */
export function answerRefresh(store: LedgerStore, now: number) {
  const r = pendingRefresh(store);
  if (r) store.setRefresh({ ...r, answered_at: now });
}

export function requestRefresh(d: LedgerParts, actor: string): Result {
  const state = d.store.load();
  if (!state) return fail("not_found", "server does not exist");
  if (state.record.state === "removed") return fail("server_removed", "the server is removed");
  const r: RefreshState = { requested_at: d.clock(), requested_by: actor, answered_at: null };
  d.store.transaction(() => {
    d.store.setRefresh(r);
    audit(d.outbox, { actor, action: "server.refresh", target: `server:${state.record.id}` });
  });
  return { ok: true };
}
