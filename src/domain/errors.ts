/**
 * Every error code the API answers with, listed once. Services and objects speak in these codes
 * (a thrown DomainError, or a Failure in an object's result); which HTTP status each one is, is
 * decided at the edge alone, in one exhaustive table (src/http/errors.ts). FleetLock's `{kind,value}`
 * refusals are a protocol of their own (FLEETLOCK_KINDS in ./enums).
 * Pure: no imports.
 */
export const ERROR_CODES = [
  // The request itself: its body, query, path, headers and method.
  "validation_failed",
  "invalid_query",
  "invalid_param",
  "invalid_header",
  "invalid_form",
  "invalid_cookie",
  "invalid_cursor",
  "duplicate_agent",
  "malformed_json",
  "bad_request",
  "payload_too_large",
  "unsupported_media_type",
  "unsupported_content_encoding",
  "unsupported_charset",
  // A WebSocket endpoint asked without `Upgrade: websocket` (the host channel).
  "upgrade_required",
  "method_not_allowed",
  "not_found",
  "internal_error",
  // An object the request needed (a fleet's coordinator, a server's ledger) did not answer: what
  // it did is not known, so asking again (or checking) is the way on.
  "unavailable",
  // Who is asking.
  "unauthorized",
  "forbidden",
  // Data upgrades.
  "upgrade_in_progress",
  "upgrade_lease_held",
  "upgrade_failed",
  // Fleets and their intent.
  "already_exists",
  "fleet_removal_pending",
  "fleet_not_empty",
  "unknown_fleet",
  "unknown_channel",
  "too_many_capabilities",
  "concurrent_change",
  // Fleet specs.
  "invalid_spec",
  "precondition_failed",
  "report_tag_unknown",
  // Servers (their ledgers).
  "generation_conflict",
  "stale_generation",
  "generation_not_issued",
  "server_removed",
  "fleetlock_id_taken",
  "reservation_expired",
  "lifecycle_change_refused",
  "uninstall_blocked",
  "decommission_acknowledged",
  "not_decommissioning",
  // Reboot coordination.
  "not_held",
  "not_queued",
  // The fleet's disruption budget is spent (a drift fix, refused: src/fleetlock/fix-budget.ts).
  "budget_exhausted",
  // Webhooks.
  "too_many_webhooks",
  // Rollouts.
  "invalid_state",
  "rollout_in_progress",
  "no_targets",
  "invalid_strategy",
  // Naming a server by hostname.
  "ambiguous_server",
  "unknown_server",
  "hostname_taken",
  // Enrollment: a token's hostname pattern refuses the hostname; a machine already enrolled as another hostname.
  "hostname_not_allowed",
  "machine_enrolled",
  // The image catalog.
  "image_not_found",
  "image_in_use",
  "image_conflict",
  "digest_mismatch",
  "upload_incomplete",
  "invalid_part",
  "range_not_satisfiable",
  // Sign-in through an identity provider: its keys or endpoints cannot be reached just now.
  "identity_provider_unavailable",
  // Server token rotation: another rotation committed first; its token is the one that works.
  "token_rotated",
  // A create's Idempotency-Key sent again with another request, or whose answer can no longer be given again.
  "idempotency_key_reused",
] as const;

export type ErrorCode = (typeof ERROR_CODES)[number];

const KNOWN = new Set<string>(ERROR_CODES);
export const isErrorCode = (code: unknown): code is ErrorCode => typeof code === "string" && KNOWN.has(code);

/**
 * A refusal the client can act on, thrown by services and the edge's own checks; rendered as
 * `{ error: { code, message, details? } }` with the status its code maps to. `retryAfterS` says
 * when trying again makes sense (the edge sends it as Retry-After).
 */
export class DomainError extends Error {
  constructor(
    readonly code: ErrorCode,
    message: string,
    readonly details?: unknown,
    readonly hints: { retryAfterS?: number } = {},
  ) {
    super(message);
  }
}

export const notFound = (what: string, id: string) => new DomainError("not_found", `${what} '${id}' does not exist`);
/** A request naming a fleet that does not exist (or one the caller may not see): 422, not a 404 of the route. */
export const unknownFleet = (fleet: string) => new DomainError("unknown_fleet", `fleet '${fleet}' does not exist`);
