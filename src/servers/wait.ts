/**
 * GET /v1/servers/{id}?wait: an operator waiting for a server's view to change. The wait is held
 * here, in the Worker, while the ledger sleeps (src/ledger/waits.ts, src/objects/kit/wake.ts): the
 * ledger wakes it on a write that changes the view's tag, or asks to be looked at again when the
 * status would turn stale with no write.
 */
import { notFound } from "../domain/errors";
import type { Env } from "../env";
import type { ServerView } from "../ledger/view";
import { viewTag } from "../ledger/view-tag";
import { viewWaitRequest, type ViewWaitAnswer } from "../ledger/waits";
import { waitForWake } from "../objects/kit/wake";
import { ledgerOf } from "../objects/stubs";

/** The view once its tag differs from `etag` (`view: null` when `waitMs` ran out first, or the client left). */
export async function viewWhenChanged(
  env: Env,
  id: string,
  etag: string,
  waitMs: number,
  signal?: AbortSignal,
): Promise<{ etag: string; view: ServerView | null }> {
  const ledger = ledgerOf(env, id);
  const until = Date.now() + waitMs;
  for (;;) {
    const wake = await waitForWake(() => ledger.fetch(viewWaitRequest(etag)), until, signal);
    if (wake.kind === "answered") {
      const answer = (await wake.response.json()) as ViewWaitAnswer;
      if (!answer) throw notFound("server", id);
      return { etag: answer.etag, view: answer.view };
    }
    if (wake.kind === "timeout" || wake.kind === "aborted") return { etag, view: null };
    const view = await ledger.view();
    if (!view) throw notFound("server", id);
    const tag = viewTag(view);
    if (tag !== etag) return { etag: tag, view };
    if (Date.now() >= until) return { etag, view: null };
  }
}
