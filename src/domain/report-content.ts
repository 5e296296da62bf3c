/**
 * Everything a host's report says except when it was said: two reports with the same content tell
 * the server the same. The ledger keys its stored report by it (src/ledger/store.ts) and the
 * reference agent compares its reports by it (agent/agent.ts), so the two agree by construction.
 */
export interface ReportContent {
  generation: number;
  boot_id: string;
  agents: unknown[];
  errors: unknown[];
  assignments: unknown;
}

export function contentKey(r: ReportContent) {
  return JSON.stringify([r.generation, r.boot_id, r.agents, r.errors, r.assignments]);
}

/**
 * Whether two reports have the same content, exactly when their contentKeys are equal, without
 * serializing either: a ledger tells an unchanged report (a heartbeat, the common case) from a
 * change by walking it against the one it holds, where contentKey would build a string of it.
 */
export function sameContent(a: ReportContent, b: ReportContent) {
  return (
    a.generation === b.generation &&
    a.boot_id === b.boot_id &&
    sameJson(a.agents, b.agents) &&
    sameJson(a.errors, b.errors) &&
    sameJson(a.assignments, b.assignments)
  );
}

/**
 * JSON.stringify(a) === JSON.stringify(b), for the JSON-shaped values a validated report holds:
 * objects compared key by key in order (a different order is a different text), a property whose
 * value is undefined skipped as stringify skips it, an array's undefined standing for null.
 */
function sameJson(a: unknown, b: unknown): boolean {
  if (a === b) return true;
  if (typeof a !== "object" || typeof b !== "object" || a === null || b === null) {
    // Only the texts stringify gives alike for values that differ: null, undefined (in an array)
    // and a number that is not finite are all "null".
    return asNull(a) && asNull(b);
  }
  if (Array.isArray(a) !== Array.isArray(b)) return false;
  if (Array.isArray(a)) {
    const bs = b as unknown[];
    if (a.length !== bs.length) return false;
    for (let i = 0; i < a.length; i++) if (!sameJson(a[i], bs[i])) return false;
    return true;
  }
  const ao = a as Record<string, unknown>;
  const bo = b as Record<string, unknown>;
  const ak = Object.keys(ao);
  const bk = Object.keys(bo);
  // Walked side by side, a property holding undefined skipped on either side (no filtered copies:
  // this runs on every report, and a parsed report holds no undefined).
  let i = 0;
  let j = 0;
  for (;;) {
    while (i < ak.length && ao[ak[i]] === undefined) i++;
    while (j < bk.length && bo[bk[j]] === undefined) j++;
    if (i === ak.length || j === bk.length) return i === ak.length && j === bk.length;
    if (ak[i] !== bk[j] || !sameJson(ao[ak[i]], bo[bk[j]])) return false;
    i++;
    j++;
  }
}

const asNull = (v: unknown) => v === null || v === undefined || (typeof v === "number" && !Number.isFinite(v));
