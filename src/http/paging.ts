import { z } from "@hono/zod-openapi";
import { DEFAULT_PAGE_SIZE, MAX_CURSOR_LENGTH, MAX_PAGE_SIZE } from "../domain/limits";
import { DomainError } from "../domain/errors";

const DECIMAL = /^\d{1,16}$/;

/**
 * An integer read from a query string or a path: decimal digits only, in range. `z.coerce.number()`
 * took `0x10` as 16, `1e2` as 100, ` 5` as 5 and an empty value as 0, so a typo in a script became a
 * different request instead of an error. Every route's numeric parameter is built here.
 */
export function decimalParam(min: number, max: number) {
  return z.preprocess(
    (v) => (typeof v === "string" && DECIMAL.test(v) ? Number(v) : v),
    z
      .number({
        error: (issue) =>
          issue.input === "" ? "empty; give a decimal integer" : "expected a decimal integer (digits only)",
      })
      .int()
      .min(min)
      .max(max),
  );
}

export const limitParam = decimalParam(1, MAX_PAGE_SIZE).default(DEFAULT_PAGE_SIZE);
export const cursorParam = z.string().max(MAX_CURSOR_LENGTH).optional();

/** Cursors are opaque to clients: base64url of the last row's sort key. */
export function encodeCursor(key: string[]): string {
  return btoa(JSON.stringify(key)).replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "");
}

export function decodeCursor(cursor: string | undefined, parts: number): string[] | null {
  if (!cursor) return null;
  try {
    const key = JSON.parse(atob(cursor.replace(/-/g, "+").replace(/_/g, "/")));
    if (Array.isArray(key) && key.length === parts && key.every((k) => typeof k === "string")) return key;
  } catch {
    // fall through to the error below
  }
  throw new DomainError("invalid_cursor", "cursor is not one this API issued");
}

/** For lists keyed by an integer id (audit log, upgrade history). */
export function decodeIdCursor(cursor: string | undefined): number | null {
  const key = decodeCursor(cursor, 1);
  if (!key) return null;
  const id = Number(key[0]);
  if (!/^\d{1,15}$/.test(key[0]) || !Number.isSafeInteger(id)) {
    throw new DomainError("invalid_cursor", "cursor is not one this API issued");
  }
  return id;
}

/** Fetches limit+1 rows to know whether another page exists without a count query. */
export function page<T>(rows: T[], limit: number, keyOf: (row: T) => string[]) {
  const items = rows.slice(0, limit);
  const next = rows.length > limit ? encodeCursor(keyOf(items[items.length - 1])) : null;
  return { items, next_cursor: next };
}
