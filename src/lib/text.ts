/**
 * Whether strings are text: a lone UTF-16 surrogate is legal in JSON (`"\ud800"`) but is no
 * character. An object keeps such a string as sent (its JSON escapes it), while D1 stores UTF-8,
 * where it turns into U+FFFD: the owner and the index would then hold two different values.
 */

/** A lone surrogate: a pair is one code point under the u flag, so only an unpaired half matches. */
const LONE_SURROGATE = /\p{Cs}/u;

/**
 * The path (dot-joined, as a validation issue's) of the first key or string value that is not
 * well-formed text, or null when every one is.
 */
export function illFormedAt(value: unknown, path: (string | number)[] = []): string | null {
  if (typeof value === "string") return LONE_SURROGATE.test(value) ? path.join(".") : null;
  if (value === null || typeof value !== "object") return null;
  if (Array.isArray(value)) {
    for (let i = 0; i < value.length; i++) {
      const at = illFormedAt(value[i], [...path, i]);
      if (at !== null) return at;
    }
    return null;
  }
  for (const [key, v] of Object.entries(value)) {
    if (LONE_SURROGATE.test(key)) return [...path, key].join(".");
    const at = illFormedAt(v, [...path, key]);
    if (at !== null) return at;
  }
  return null;
}
