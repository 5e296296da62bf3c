/** One text per value, whatever the order of its keys: what spec hashes and comparisons read. */
import { sha256Hex } from "../lib/crypto";

function sorted(value: unknown): unknown {
  if (Array.isArray(value)) return value.map(sorted);
  if (value && typeof value === "object") {
    const o = value as Record<string, unknown>;
    return Object.fromEntries(
      Object.keys(o)
        .filter((k) => o[k] !== undefined)
        .sort()
        .map((k) => [k, sorted(o[k])]),
    );
  }
  return value;
}

const canonicalJson = (value: unknown) => JSON.stringify(sorted(value));

export const sameValue = (a: unknown, b: unknown) => canonicalJson(a) === canonicalJson(b);

/** A map with its keys in order (exports read the same every time). */
export const byKey = <T>(entries: Iterable<[string, T]>): Record<string, T> =>
  Object.fromEntries([...entries].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)));

/** The spec's hash: its ETag, and what the audit row of an apply names. */
export const specHash = async (spec: unknown) => (await sha256Hex(canonicalJson(spec))).slice(0, 32);
