import { randomSecret, sha256Hex } from "../lib/crypto";

export type Scope = "read" | "write" | "admin";
export const SCOPE_RANK: Record<Scope, number> = { read: 1, write: 2, admin: 3 };

/**
 * Tokens name their own row (`hmo.<id>.<secret>`, `hms.<server id>.<secret>`), so a check is one
 * keyed lookup plus a constant-time digest compare, and a host's token routes straight to its
 * ledger without a D1 read.
 */
const FORMAT = /^(hmo|hms)\.([0-9a-f-]{36})\.([A-Za-z0-9_-]{43})$/;

export type ParsedToken = { kind: "operator" | "server"; id: string };

export function parseToken(token: string): ParsedToken | null {
  const m = FORMAT.exec(token);
  if (!m) return null;
  return { kind: m[1] === "hmo" ? "operator" : "server", id: m[2] };
}

export async function issueToken(kind: "operator" | "server", id: string) {
  const token = `${kind === "operator" ? "hmo" : "hms"}.${id}.${randomSecret()}`;
  return { token, hash: await sha256Hex(token) };
}
