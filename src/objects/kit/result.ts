/**
 * What a Durable Object's RPC answers: a domain result, never an HTTP status. Errors thrown across
 * RPC lose their shape, so a client's mistake travels as a value with a code (one of the API's
 * codes, src/domain/errors.ts); the edge maps codes to statuses in one table (src/http/errors.ts).
 */
import { DomainError, type ErrorCode } from "../../domain/errors";

export interface Failure {
  ok: false;
  code: ErrorCode;
  message: string;
  details?: unknown;
}

export type Result<T extends object = object> = ({ ok: true } & T) | Failure;

export const fail = (code: ErrorCode, message: string, details?: unknown): Failure =>
  details === undefined ? { ok: false, code, message } : { ok: false, code, message, details };

/** The failure as the error a service throws. */
export const errorOf = (f: Failure) => new DomainError(f.code, f.message, f.details);

/** The success of a domain result, or its failure thrown as a DomainError. */
export function unwrap<R extends { ok: boolean }>(result: R): Exclude<R, { ok: false }> {
  if (!result.ok) throw errorOf(result as unknown as Failure);
  return result as Exclude<R, { ok: false }>;
}
