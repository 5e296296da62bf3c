import type { DomainCode, Failure } from "../objects/kit/result";
import type { ContentfulStatusCode } from "hono/utils/http-status";

/** A failure the client can act on; rendered as `{ error: { code, message, details? } }`. */
export class ApiError extends Error {
  constructor(
    readonly status: ContentfulStatusCode,
    readonly code: string,
    message: string,
    readonly details?: unknown,
    readonly headers?: Record<string, string>,
  ) {
    super(message);
  }
}

export const errorBody = (code: string, message: string, details?: unknown) => ({
  error: details === undefined ? { code, message } : { code, message, details },
});

export const notFound = (what: string, id: string) =>
  new ApiError(404, "not_found", `${what} '${id}' does not exist`);

/** The one place where a domain result's code becomes an HTTP status. */
export const STATUS_OF_CODE = {
  not_found: 404,
  unauthorized: 401,
  generation_conflict: 409,
  stale_generation: 409,
  generation_not_issued: 409,
  server_removed: 409,
  not_held: 404,
  fleetlock_id_taken: 409,
  lifecycle_change_refused: 409,
  uninstall_blocked: 409,
  decommission_acknowledged: 409,
  not_decommissioning: 409,
  invalid_state: 409,
  rollout_in_progress: 409,
} as const satisfies Record<DomainCode, ContentfulStatusCode>;

export const apiErrorOf = (f: Failure) => new ApiError(STATUS_OF_CODE[f.code], f.code, f.message, f.details);

/** The success of a domain result, or its failure thrown as the ApiError its code maps to. */
export function unwrap<R extends { ok: boolean }>(result: R): Exclude<R, { ok: false }> {
  if (!result.ok) throw apiErrorOf(result as unknown as Failure);
  return result as Exclude<R, { ok: false }>;
}
