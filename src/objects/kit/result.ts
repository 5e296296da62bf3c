/**
 * What a Durable Object's RPC answers: a domain result, never an HTTP status. Errors thrown across
 * RPC lose their shape, so a client's mistake travels as a value with a code; the edge maps codes
 * to statuses in one table (src/http/errors.ts).
 */

export const DOMAIN_CODES = [
  "not_found",
  "unauthorized",
  "generation_conflict",
  "stale_generation",
  "generation_not_issued",
  "server_removed",
  "not_held",
  "fleetlock_id_taken",
  // issue 8: fleet intent and lifecycle
  "lifecycle_change_refused",
  "uninstall_blocked",
  "decommission_acknowledged",
  "not_decommissioning",
  // issue 9: rollouts
  "invalid_state",
  "rollout_in_progress",
] as const;

export type DomainCode = (typeof DOMAIN_CODES)[number];

export interface Failure {
  ok: false;
  code: DomainCode;
  message: string;
  details?: unknown;
}

export type Result<T extends object = object> = ({ ok: true } & T) | Failure;

export const fail = (code: DomainCode, message: string, details?: unknown): Failure =>
  details === undefined ? { ok: false, code, message } : { ok: false, code, message, details };
