import type { Scope } from "./enums";

/**
 * The fleets an operator may act on: every fleet ("*"), or these fleet names. Names, not a pattern:
 * a fleet created later under a name the list does not hold stays out of reach.
 */
export type FleetAccess = "*" | readonly string[];

/** How an operator proved who they are: an operator token, the ADMIN_TOKEN secret, or an SSO provider. */
export type OperatorVia = "token" | "bootstrap" | "access" | "oidc";

export type OperatorPrincipal = {
  kind: "operator";
  id: string;
  name: string;
  scope: Scope;
  fleets: FleetAccess;
  via: OperatorVia;
  /** ms epoch after which the credential is refused; absent = never. */
  expiresAt?: number;
};

/** The id the ADMIN_TOKEN secret acts under (it has no token row). */
export const BOOTSTRAP_ID = "bootstrap";

/** Who a request acts for, once authenticated (src/auth/principal.ts). */
export type Principal = OperatorPrincipal | { kind: "server"; serverId: string; tokenHash: string };

/** Who the principal is, for the audit log. */
export function actorOf(p: Principal) {
  // A Cloudflare Access user has no token row: the id names the user ("access:<email>").
  if (p.kind === "operator" && p.via === "access") return p.id;
  return p.kind === "operator" ? `token:${p.id}` : `server:${p.serverId}`;
}

/**
 * Whether the principal may see and act on the fleet named `fleetName`. A server token reaches
 * only its own server, through /v1/agent/*, never a fleet's operator routes. The console's live
 * socket asks it with its session's fleets (an operator's, as the session's token carries them).
 */
export function fleetAllowed(p: Principal | { kind: "operator"; fleets: FleetAccess }, fleetName: string): boolean {
  if (p.kind !== "operator") return false;
  return p.fleets === "*" || p.fleets.includes(fleetName);
}

/** Whether the principal sees every fleet (nothing to filter). */
export const allFleets = (p: Principal) => p.kind === "operator" && p.fleets === "*";

/** The fleets a list may show: null for every fleet, else these names (none for a server token). */
export function visibleFleets(p: Principal): readonly string[] | null {
  if (p.kind !== "operator") return [];
  return p.fleets === "*" ? null : p.fleets;
}
