/** The keys sorted by UTF-16 code unit. */
const codeUnitOrder = (keys: string[]) => keys.sort((a, b) => (a < b ? -1 : a > b ? 1 : 0));

/**
 * JSON with every object's keys sorted, so `{a, b}` and `{b, a}` are one text: what a request's
 * fingerprint hashes (a retried create is known by it) and what two values compare as.
 * Members whose value is undefined are left out, as JSON.stringify leaves them; an undefined
 * array item or value is null.
 */
export function canonicalJson(value: unknown, order: (keys: string[]) => string[] = codeUnitOrder): string {
  if (Array.isArray(value)) return `[${value.map((v) => canonicalJson(v ?? null, order)).join(",")}]`;
  if (value !== null && typeof value === "object") {
    const o = value as Record<string, unknown>;
    const keys = order(Object.keys(o).filter((k) => o[k] !== undefined));
    return `{${keys.map((k) => `${JSON.stringify(k)}:${canonicalJson(o[k], order)}`).join(",")}}`;
  }
  return JSON.stringify(value ?? null);
}

/**
 * The sorted keys in the order an object built from them gives them back: JavaScript puts the
 * integer-like ones ("2", "10") first, in numeric order. Texts hashed with this order before the
 * two canonical forms were one (a fleet spec's hash) keep their bytes.
 */
export const objectKeyOrder = (keys: string[]) =>
  Object.keys(Object.fromEntries(codeUnitOrder(keys).map((k) => [k, 0])));
