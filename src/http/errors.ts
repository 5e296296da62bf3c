import type { Context } from "hono";
import type { ContentfulStatusCode } from "hono/utils/http-status";
import type { DomainError, ErrorCode } from "../domain/errors";
import type { AppEnv } from "./types";

/**
 * The one place where an error code becomes an HTTP status: every code of the API's list
 * (src/domain/errors.ts) has exactly one, so a new code does not type-check until it is given one.
 */
export const STATUS_OF_CODE = {
  validation_failed: 400,
  invalid_query: 400,
  invalid_param: 400,
  invalid_header: 400,
  invalid_form: 400,
  invalid_cookie: 400,
  invalid_cursor: 400,
  duplicate_agent: 400,
  malformed_json: 400,
  bad_request: 400,
  payload_too_large: 413,
  unsupported_media_type: 415,
  unsupported_content_encoding: 415,
  unsupported_charset: 415,
  upgrade_required: 426,
  method_not_allowed: 405,
  not_found: 404,
  internal_error: 500,
  unavailable: 503,
  unauthorized: 401,
  forbidden: 403,
  upgrade_in_progress: 503,
  upgrade_lease_held: 409,
  upgrade_failed: 503,
  already_exists: 409,
  fleet_removal_pending: 409,
  fleet_not_empty: 409,
  unknown_fleet: 422,
  unknown_channel: 422,
  too_many_capabilities: 409,
  concurrent_change: 409,
  invalid_spec: 422,
  precondition_failed: 412,
  report_tag_unknown: 412,
  generation_conflict: 409,
  stale_generation: 409,
  generation_not_issued: 409,
  server_removed: 409,
  fleetlock_id_taken: 409,
  reservation_expired: 503,
  lifecycle_change_refused: 409,
  uninstall_blocked: 409,
  decommission_acknowledged: 409,
  not_decommissioning: 409,
  not_held: 404,
  not_queued: 404,
  budget_exhausted: 409,
  too_many_webhooks: 409,
  invalid_state: 409,
  rollout_in_progress: 409,
  no_targets: 422,
  invalid_strategy: 422,
  ambiguous_server: 409,
  unknown_server: 422,
  hostname_taken: 409,
  hostname_not_allowed: 403,
  machine_enrolled: 409,
  image_not_found: 422,
  image_in_use: 409,
  image_conflict: 409,
  digest_mismatch: 422,
  upload_incomplete: 409,
  invalid_part: 400,
  range_not_satisfiable: 416,
  identity_provider_unavailable: 503,
  token_rotated: 409,
  idempotency_key_reused: 409,
} as const satisfies Record<ErrorCode, ContentfulStatusCode>;

const errorBody = (code: ErrorCode, message: string, details?: unknown) => ({
  error: details === undefined ? { code, message } : { code, message, details },
});

/** An error answer, carrying the request id so a report can be matched with the logs. */
export function errorAnswer(c: Context<AppEnv>, code: ErrorCode, message: string, details?: unknown) {
  const { error } = errorBody(code, message, details);
  return { error: { ...error, request_id: c.get("requestId") } };
}

/** The headers an error's answer carries: the scheme to authenticate with on a 401, when to retry. */
function headersOf(err: DomainError): Record<string, string> {
  const headers: Record<string, string> = {};
  if (err.code === "unauthorized") headers["WWW-Authenticate"] = 'Bearer realm="harbormaster"';
  // RFC 9110 §15.5.22: a 426 names the protocol to switch to.
  if (err.code === "upgrade_required") headers.Upgrade = "websocket";
  if (err.hints.retryAfterS !== undefined) headers["Retry-After"] = String(err.hints.retryAfterS);
  return headers;
}

/** A DomainError as its answer: the status of its code, its body, its headers. */
export const renderDomainError = (c: Context<AppEnv>, err: DomainError) =>
  c.json(errorAnswer(c, err.code, err.message, err.details), STATUS_OF_CODE[err.code], headersOf(err));
