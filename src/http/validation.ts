import type { Hook } from "@hono/zod-openapi";
import type { ZodError } from "zod";
import { ApiError } from "./errors";

/** Field-level detail a client can act on, without echoing the whole schema. */
export function issuesOf(error: ZodError) {
  return error.issues.map((i) => ({ path: i.path.join("."), message: i.message }));
}

/**
 * Every zod failure becomes `400 validation_failed`, except issues that carry their own code
 * (e.g. `duplicate_agent`), which name the problem more precisely.
 */
export const validationHook: Hook<unknown, any, any, unknown> = (result) => {
  if (result.success) return;
  const error = result.error as ZodError;
  const specific = error.issues
    .map((i) => (i as { params?: { code?: string } }).params?.code)
    .find((c): c is string => typeof c === "string");
  throw new ApiError(
    400,
    specific ?? (result.target === "json" ? "validation_failed" : `invalid_${result.target}`),
    specific ? error.issues[0].message : `request ${result.target} does not match the schema`,
    issuesOf(error),
  );
};
