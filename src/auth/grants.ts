/**
 * What a new operator token may carry, decided from the token that creates it (pure): never more
 * than the creator has, so a token scoped to some fleets cannot mint its way out of them, and a
 * short-lived credential (an SSO session) cannot mint one that outlives it.
 */
import { DomainError } from "../domain/errors";
import type { FleetAccess, OperatorPrincipal } from "../domain/principal";
import type { Scope } from "../domain/enums";
import { iso } from "../lib/time";
import { scopeRank } from "./tokens";

export interface GrantRequest {
  scope: Scope;
  fleets?: "*" | string[];
  expires_at?: string;
}

export interface Grant {
  scope: Scope;
  fleets: "*" | string[];
  expiresAt: number | null;
}

const invalid = (path: string, message: string, detail: string) =>
  new DomainError("validation_failed", message, [{ path, message: detail }]);

export function grantFor(creator: OperatorPrincipal, want: GrantRequest, now: number): Grant {
  if (scopeRank(want.scope) > scopeRank(creator.scope)) {
    throw new DomainError("forbidden", `a '${creator.scope}' token cannot create a '${want.scope}' token`);
  }
  const fleets = want.fleets ?? copyOf(creator.fleets);
  if (creator.fleets !== "*") {
    // Refused by the creator's own list alone, whether the fleet exists or not: nothing is confirmed.
    if (fleets === "*") {
      throw new DomainError("forbidden", 'a token limited to some fleets cannot create a "*" token');
    }
    const outside = fleets.filter((f) => !creator.fleets.includes(f));
    if (outside.length > 0) {
      throw new DomainError("forbidden", `this token may grant only its own fleets (${creator.fleets.join(", ")})`, {
        fleets: outside,
      });
    }
  }
  let expiresAt: number | null = null;
  if (want.expires_at !== undefined) {
    expiresAt = Date.parse(want.expires_at);
    if (!(expiresAt > now)) throw invalid("expires_at", "expires_at must be in the future", "in the past");
  }
  if (creator.expiresAt !== undefined) {
    if (expiresAt === null) expiresAt = creator.expiresAt;
    else if (expiresAt > creator.expiresAt) {
      throw invalid(
        "expires_at",
        `expires_at is at most ${iso(creator.expiresAt)}, when the token creating it expires`,
        "after the creating token expires",
      );
    }
  }
  return { scope: want.scope, fleets, expiresAt };
}

const copyOf = (fleets: FleetAccess): "*" | string[] => (fleets === "*" ? "*" : [...fleets]);
