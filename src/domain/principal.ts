import type { Scope } from "./enums";

/** Who a request acts for, once authenticated (src/auth/principal.ts). */
export type Principal =
  | { kind: "operator"; id: string; name: string; scope: Scope }
  | { kind: "server"; serverId: string; tokenHash: string };

/** Who the principal is, for the audit log. */
export function actorOf(p: Principal) {
  return p.kind === "operator" ? `token:${p.id}` : `server:${p.serverId}`;
}
