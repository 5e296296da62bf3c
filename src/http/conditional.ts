/**
 * `If-None-Match` as RFC 9110 §13.1.2 reads it: `*` matches any current representation, and a list
 * matches when any of its entity tags matches (weak comparison, so `W/"7"` matches `"7"`). Our ETags
 * are generations, `"7"`; tags that are not a generation can never match and are ignored.
 */
export type IfNoneMatch = { any: true } | { any: false; generations: number[] };

export function parseIfNoneMatch(header: string | undefined | null): IfNoneMatch | null {
  if (header == null || header.trim() === "") return null;
  if (header.trim() === "*") return { any: true };
  const generations: number[] = [];
  for (const tag of header.split(",")) {
    const m = /^\s*(?:W\/)?"(\d{1,15})"\s*$/.exec(tag);
    if (m) generations.push(Number(m[1]));
  }
  return { any: false, generations };
}

/** Whether the current generation matches the condition (then a GET answers 304). */
export const matchesGeneration = (condition: IfNoneMatch | null, generation: number) =>
  condition !== null && (condition.any || condition.generations.includes(generation));

/**
 * The generation to tell the ledger the host holds, so it can park a long poll: the newest listed
 * (generations only climb, so that is the one a poll waits to see replaced).
 */
export const heldGeneration = (condition: IfNoneMatch | null): number | null =>
  condition && !condition.any && condition.generations.length ? Math.max(...condition.generations) : null;
