/**
 * Structured logs, one JSON object per line, as `wrangler tail` and Workers Logs index them.
 * Free text is never logged: every line has `level` and `msg`, and errors carry their `stack`.
 */
export function logLine(level: "info" | "warn" | "error", msg: string, fields: Record<string, unknown> = {}) {
  const line = JSON.stringify({ level, msg, ...fields });
  if (level === "error") console.error(line);
  else if (level === "warn") console.warn(line);
  else console.log(line);
}

/** An error's message and stack, as log fields. */
export function errorFields(err: unknown) {
  const e = err instanceof Error ? err : new Error(String(err));
  return { error: e.message, stack: e.stack };
}
