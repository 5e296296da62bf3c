/**
 * An enrollment token's hostname pattern: a hostname where `*` stands for any run of hostname
 * characters (dots included) and `?` for one. Checked with the classic two-pointer wildcard match,
 * whose work is bounded by the product of the two lengths (at most 253 × 253), so no pattern can
 * make a check slow the way a backtracking regular expression can. A dozen lines is less to trust
 * than a glob library built for file paths (where `*` stops at `/` and braces, classes and
 * escapes would all need refusing). Pure.
 */
const MAX_PATTERN_LENGTH = 253;
const MAX_PATTERN_WILDCARDS = 8;
const PATTERN = /^[a-z0-9*?][a-z0-9.*?-]*$/;

/** Why a pattern is refused, or null when it is a valid one. */
export function patternProblem(pattern: string): string | null {
  if (pattern.length === 0 || pattern.length > MAX_PATTERN_LENGTH)
    return `a pattern is 1 to ${MAX_PATTERN_LENGTH} characters`;
  if (!PATTERN.test(pattern)) return "a pattern is lower-case letters, digits, '.', '-', and the wildcards '*' and '?'";
  if ((pattern.match(/[*?]/g) ?? []).length > MAX_PATTERN_WILDCARDS)
    return `a pattern has at most ${MAX_PATTERN_WILDCARDS} wildcards`;
  return null;
}

/** Whether `hostname` (compared in lower case) matches `pattern`. */
export function hostnameMatches(pattern: string, hostname: string): boolean {
  const p = pattern;
  const h = hostname.toLowerCase();
  let i = 0; // in h
  let j = 0; // in p
  let star = -1; // the last `*` seen in p
  let resume = 0; // where in h that star's run ends for now
  while (i < h.length) {
    if (j < p.length && (p[j] === "?" || p[j] === h[i])) {
      i++;
      j++;
    } else if (j < p.length && p[j] === "*") {
      star = j++;
      resume = i;
    } else if (star >= 0) {
      // Let the last star take one more character and try the rest again.
      j = star + 1;
      i = ++resume;
    } else {
      return false;
    }
  }
  while (j < p.length && p[j] === "*") j++;
  return j === p.length;
}
