import { OPERATOR_SCOPES, type Scope, type TokenKind } from "../domain/enums";
import { randomSecret, sha256Hex } from "../lib/crypto";

export type { Scope } from "../domain/enums";
/** Scopes are ordered weakest first, so a scope includes every one before it. */
export const scopeRank = (scope: Scope) => OPERATOR_SCOPES.indexOf(scope);

/**
 * Tokens name their own row (`hmo.<id>.<secret>`, `hms.<server id>.<secret>`), so a check is one
 * keyed lookup plus a constant-time digest compare, and a host's token routes straight to its
 * ledger without a D1 read.
 */
const FORMAT = /^(hmo|hms)\.([0-9a-f-]{36})\.([A-Za-z0-9_-]{43})$/;

export type ParsedToken = { kind: TokenKind; id: string };

export function parseToken(token: string): ParsedToken | null {
  const m = FORMAT.exec(token);
  if (!m) return null;
  return { kind: m[1] === "hmo" ? "operator" : "server", id: m[2] };
}

export async function issueToken(kind: TokenKind, id: string) {
  const token = `${kind === "operator" ? "hmo" : "hms"}.${id}.${randomSecret()}`;
  return { token, hash: await sha256Hex(token) };
}

/**
 * Enrollment tokens (`hme.<id>.<secret>`, src/enrollment/): the same shape and hashing, their own
 * prefix, so one is never taken for an operator's or a server's token (and neither for one).
 */
const ENROLLMENT_FORMAT = /^hme\.([0-9a-f-]{36})\.[A-Za-z0-9_-]{43}$/;

export function parseEnrollmentToken(token: string): { id: string } | null {
  const m = ENROLLMENT_FORMAT.exec(token);
  return m ? { id: m[1] } : null;
}

export async function issueEnrollmentToken(id: string) {
  const token = `hme.${id}.${randomSecret()}`;
  return { token, hash: await sha256Hex(token) };
}
