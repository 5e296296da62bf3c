/** One text per value, whatever the order of its keys: what spec hashes and comparisons read. */
import { canonicalJson, objectKeyOrder } from "../lib/canonical-json";
import { sha256Hex } from "../lib/crypto";

export const sameValue = (a: unknown, b: unknown) => canonicalJson(a) === canonicalJson(b);

/** A map with its keys in order (exports read the same every time). */
export const byKey = <T>(entries: Iterable<[string, T]>): Record<string, T> =>
  Object.fromEntries([...entries].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)));

/**
 * The spec's hash: its ETag, and what the audit row of an apply names. Its keys in an object's
 * order, as it was first hashed (stored ETags and audit rows name these bytes).
 */
export const specHash = async (spec: unknown) => (await sha256Hex(canonicalJson(spec, objectKeyOrder))).slice(0, 32);
