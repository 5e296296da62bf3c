/**
 * Whether strings are text: a lone UTF-16 surrogate is legal in JSON (`"\ud800"`) but is no
 * character. An object keeps such a string as sent (its JSON escapes it), while D1 stores UTF-8,
 * where it turns into U+FFFD: the owner and the index would then hold two different values.
 */

/** A lone surrogate: a pair is one code point under the u flag, so only an unpaired half matches. */
const LONE_SURROGATE = /\p{Cs}/u;

/** Whether any key or string value is not well-formed text (no allocation: it runs on every body). */
function illFormed(value: unknown): boolean {
  if (typeof value === "string") return LONE_SURROGATE.test(value);
  if (value === null || typeof value !== "object") return false;
  if (Array.isArray(value)) {
    for (const v of value) if (illFormed(v)) return true;
    return false;
  }
  for (const key in value) {
    if (LONE_SURROGATE.test(key) || illFormed((value as Record<string, unknown>)[key])) return true;
  }
  return false;
}

/** The path to the first ill-formed key or string, once one is known to be there. */
function pathTo(value: unknown, path: (string | number)[]): (string | number)[] | null {
  if (typeof value === "string") return LONE_SURROGATE.test(value) ? path : null;
  if (value === null || typeof value !== "object") return null;
  for (const [key, v] of Object.entries(value)) {
    const at: string | number = Array.isArray(value) ? Number(key) : key;
    if (!Array.isArray(value) && LONE_SURROGATE.test(key)) return [...path, at];
    const found = pathTo(v, [...path, at]);
    if (found) return found;
  }
  return null;
}

/**
 * The path (dot-joined, as a validation issue's) of the first key or string value that is not
 * well-formed text, or null when every one is.
 */
export function illFormedAt(value: unknown): string | null {
  if (!illFormed(value)) return null;
  return (pathTo(value, []) ?? []).join(".");
}
