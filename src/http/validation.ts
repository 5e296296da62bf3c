import type { Hook } from "@hono/zod-openapi";
import type { z, ZodError } from "zod";
import { DomainError, isErrorCode, type ErrorCode } from "../domain/errors";
import { illFormedAt } from "../lib/text";
import type { AppEnv } from "./types";

/** Field-level detail a client can act on, without echoing the whole schema. */
function issuesOf(error: ZodError) {
  return error.issues.map((i) => ({ path: i.path.join("."), message: i.message }));
}

/** The code of a request part that does not match its schema (a body: `validation_failed`). */
const CODE_OF_TARGET: Record<string, ErrorCode> = {
  json: "validation_failed",
  query: "invalid_query",
  param: "invalid_param",
  header: "invalid_header",
  form: "invalid_form",
  cookie: "invalid_cookie",
};

/**
 * Every zod failure becomes `400 validation_failed`, except issues that carry their own code
 * (e.g. `duplicate_agent`, one of the API's codes), which name the problem more precisely.
 */
export const validationHook: Hook<unknown, AppEnv, string, unknown> = (result) => {
  if (result.success) {
    if (result.target === "json") {
      const refusal = illFormedRefusal(result.data);
      if (refusal) throw refusal;
    }
    return;
  }
  throw refusalOf(result.error as ZodError, result.target);
};

/**
 * A body whose schema passed may still hold a string that is not text (a lone surrogate): refused
 * as a field that does not match, since D1 could not store it as sent (../lib/text.ts). The host
 * channel's reports are checked with it too.
 */
export function illFormedRefusal(data: unknown): DomainError | null {
  const at = illFormedAt(data);
  if (at === null) return null;
  const message = "a lone UTF-16 surrogate is not a character";
  return new DomainError("validation_failed", `request body does not match the schema: ${at || "body"}: ${message}`, [
    { path: at, message },
  ]);
}

/** The refusal of a request part that fails its schema (the host channel answers reports with it too). */
export function refusalOf(error: ZodError, target: string): DomainError {
  // The issue that carries its own code speaks for the request, wherever it is in the list.
  const coded = error.issues.find((i) => isErrorCode((i as { params?: { code?: string } }).params?.code));
  const specific = (coded as { params?: { code?: ErrorCode } } | undefined)?.params?.code;
  return new DomainError(
    specific ?? CODE_OF_TARGET[target] ?? "validation_failed",
    coded
      ? coded.message
      : `request ${target === "json" ? "body" : target} does not match the schema: ${summaryOf(error)}`,
    issuesOf(error),
  );
}

/** The first few failing fields in a line, so a message alone says what to fix. */
function summaryOf(error: ZodError, shown = 3) {
  const parts = error.issues
    .slice(0, shown)
    .map((i) => (i.path.length ? `${i.path.join(".")}: ${i.message}` : i.message));
  return parts.join("; ") + (error.issues.length > shown ? ` (and ${error.issues.length - shown} more)` : "");
}

/**
 * A query a route validates itself (one it documents by hand, so the typed client need not pass
 * it), refused as `invalid_query` like the ones zod-openapi validates.
 */
export function parseQuery<T extends z.ZodType>(schema: T, query: Record<string, string>): z.output<T> {
  const parsed = schema.safeParse(query);
  if (!parsed.success)
    throw new DomainError(
      "invalid_query",
      `request query does not match the schema: ${summaryOf(parsed.error)}`,
      issuesOf(parsed.error),
    );
  return parsed.data;
}
