/// <reference types="vite/client" />
import { describe, expect, it } from "vitest";
import { ERROR_CODES, isErrorCode } from "../src/domain/errors";
import { STATUS_OF_CODE } from "../src/http/errors";

/** The worker's sources as text, bundled into the test by Vite (the Workers runtime has no file system). */
const SOURCES = import.meta.glob("../src/**/*.ts", { query: "?raw", import: "default", eager: true }) as Record<
  string,
  string
>;

/**
 * Every place a code is written down in the worker: thrown (`new DomainError("…"`), returned by an
 * object (`fail("…"`, `{ ok: false, code: "…" }`), answered by the edge (`errorAnswer(c, "…"`,
 * `errorBody("…"`), carried by a zod issue (`params: { code: "…" }`) or a body claim (`code: "unsupported_…"`).
 */
const PATTERNS = [
  /new DomainError\(\s*"([a-z_]+)"/g,
  /\bfail\(\s*"([a-z_]+)"/g,
  /ok: false[^}\n]*\bcode: "([a-z_]+)"/g,
  /errorAnswer\(\s*c,\s*"([a-z_]+)"/g,
  /errorBody\(\s*"([a-z_]+)"/g,
  /params: \{\s*code: "([a-z_]+)"/g,
  /\bcode: "(unsupported_[a-z_]+)"/g,
];

function codesWritten() {
  const found = new Map<string, string>();
  for (const [file, text] of Object.entries(SOURCES)) {
    for (const pattern of PATTERNS) {
      for (const m of text.matchAll(pattern)) if (!found.has(m[1])) found.set(m[1], file);
    }
  }
  return found;
}

describe("the error vocabulary", () => {
  it("lists each code once, and gives every code one 4xx or 5xx status", () => {
    expect(new Set(ERROR_CODES).size).toBe(ERROR_CODES.length);
    expect(Object.keys(STATUS_OF_CODE).sort()).toEqual([...ERROR_CODES].sort());
    for (const code of ERROR_CODES) {
      const status = STATUS_OF_CODE[code];
      expect(status, code).toBeGreaterThanOrEqual(400);
      expect(status, code).toBeLessThan(600);
    }
  });

  it("holds every code the worker's sources throw, return or answer", () => {
    const found = codesWritten();
    // The walk reads real sources: far more than a handful of codes, or the glob found nothing.
    expect(Object.keys(SOURCES).length).toBeGreaterThan(50);
    expect(found.size).toBeGreaterThan(25);
    const unlisted = [...found].filter(([code]) => !isErrorCode(code)).map(([code, file]) => `${code} (${file})`);
    expect(unlisted).toEqual([]);
  });
});
