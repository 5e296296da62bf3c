import type { ServerView } from "./view";

/**
 * The ETag of a server's view for operators (`GET /v1/servers/{id}`): a digest of everything the
 * view shows except the heartbeat (when the last report arrived and says it reconciled), so a
 * steady host's reports do not wake a waiting operator; any change of status, generation,
 * report content or record does. Weak, since last_seen may differ under the same tag.
 */
export function viewTag(view: ServerView): string {
  const { report } = view;
  const content = JSON.stringify([
    view.record,
    view.desired,
    report && [report.generation, report.boot_id, report.agents, report.errors, report.assignments],
    view.computed,
    view.plan,
    view.lifecycle,
    view.refresh,
  ]);
  return `W/"${fnv1a52(content)}"`;
}

/** FNV-1a over UTF-16 code units, 52 bits (exact in a double): cheap and synchronous. */
function fnv1a52(s: string): string {
  let h1 = 0x811c9dc5;
  let h2 = 0x050c5d1f;
  for (let i = 0; i < s.length; i++) {
    const c = s.charCodeAt(i);
    h1 = Math.imul(h1 ^ c, 0x01000193) >>> 0;
    h2 = Math.imul(h2 ^ c, 0x01000193 ^ 0x5bd1e995) >>> 0;
  }
  return ((h2 & 0xfffff) * 2 ** 32 + h1).toString(36);
}

/** Whether an If-None-Match header names `tag` (weak comparison, lists and `*` allowed). */
export function tagMatches(header: string | undefined, tag: string): boolean {
  if (!header) return false;
  const bare = (t: string) => t.trim().replace(/^W\//, "");
  return header.split(",").some((t) => t.trim() === "*" || bare(t) === bare(tag));
}
