/**
 * From who signed in to what they may do (pure). Every mapping naming the user's email or one of
 * their groups applies; the grant is the highest scope among them, on the fleets of the mappings
 * that give that scope. A principal carries one scope for all its fleets, so "admin on A" and
 * "read on B" cannot both be kept: the grant never exceeds what one mapping gives on one fleet
 * (admin on B would be more than any mapping says), and the lower grant is what is dropped.
 */
import { OPERATOR_SCOPES, type Scope } from "../domain/enums";
import type { Principal } from "../domain/principal";

type SsoProvider = "access" | "oidc";

/** Each sign-in provider as people know it. */
export const PROVIDER_NAMES = { access: "Cloudflare Access", oidc: "OpenID Connect" } as const;

export interface Identity {
  provider: SsoProvider;
  /** The provider's stable id for the user (`sub`). */
  subject: string;
  /** Lower-cased; null when the provider gave none (a service token). */
  email: string | null;
  groups: string[];
}

export interface MappingRule {
  kind: "email" | "group";
  value: string;
  scope: Scope;
  fleets: "*" | string[];
}

export interface SsoGrant {
  scope: Scope;
  fleets: "*" | string[];
}

const rank = (s: Scope) => OPERATOR_SCOPES.indexOf(s);

const matches = (rule: MappingRule, who: Identity) =>
  rule.kind === "email" ? who.email !== null && rule.value === who.email : who.groups.includes(rule.value);

/** The grant of the identity, or null when no mapping names it (it gets nothing). */
export function grantOf(who: Identity, rules: readonly MappingRule[]): SsoGrant | null {
  const hits = rules.filter((r) => matches(r, who));
  if (hits.length === 0) return null;
  const scope = hits.reduce<Scope>((best, r) => (rank(r.scope) > rank(best) ? r.scope : best), "read");
  const top = hits.filter((r) => r.scope === scope);
  if (top.some((r) => r.fleets === "*")) return { scope, fleets: "*" };
  const fleets = [...new Set(top.flatMap((r) => r.fleets as string[]))].sort();
  return { scope, fleets };
}

/** A fleet spec's `access:` key as a match: `group:ops:on-call` is the group "ops:on-call". */
export function accessKeyMatch(key: string): Pick<MappingRule, "kind" | "value"> {
  const at = key.indexOf(":");
  return { kind: key.slice(0, at) === "email" ? "email" : "group", value: key.slice(at + 1) };
}

/** A spec's `access:` row as a mapping: on the spec's own fleet, and no other. */
export const specRule = (row: {
  fleetId: string;
  kind: "email" | "group";
  value: string;
  scope: Scope;
}): MappingRule => ({
  kind: row.kind,
  value: row.value,
  scope: row.scope,
  fleets: [row.fleetId],
});

/** An email as mappings keep it: trimmed and lower-cased (providers differ in case). */
export const normalEmail = (email: string) => email.trim().toLowerCase();

/** Whether a mapping's (or a session's) fleets lie within what the principal may act on ("*" only for "*"). */
export function fleetsWithin(fleets: "*" | string[], p: Principal): boolean {
  if (p.kind !== "operator") return false;
  if (p.fleets === "*") return true;
  const own = p.fleets;
  return fleets !== "*" && fleets.every((f) => own.includes(f));
}

/** A groups claim as the mapping reads it: names only (non-empty, at most 320 characters), at most 200. */
export function groupsIn(raw: unknown): string[] {
  if (!Array.isArray(raw)) return [];
  return raw.filter((g): g is string => typeof g === "string" && g.length > 0 && g.length <= 320).slice(0, 200);
}
