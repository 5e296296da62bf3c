/**
 * JSON with every object's keys sorted, so `{a, b}` and `{b, a}` are one text: what a request's
 * fingerprint hashes (a retried create is known by it) and what two values compare as.
 * Members whose value is undefined are left out, as JSON.stringify leaves them; an undefined
 * array item or value is null.
 */
export function canonicalJson(value: unknown): string {
  if (Array.isArray(value)) return `[${value.map((v) => canonicalJson(v ?? null)).join(",")}]`;
  if (value !== null && typeof value === "object") {
    const entries = Object.entries(value as Record<string, unknown>)
      .filter(([, v]) => v !== undefined)
      .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
    return `{${entries.map(([k, v]) => `${JSON.stringify(k)}:${canonicalJson(v)}`).join(",")}}`;
  }
  return JSON.stringify(value ?? null);
}
