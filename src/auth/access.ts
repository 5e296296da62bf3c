/**
 * Cloudflare Access: a request that came through an Access application carries the user's JWT
 * (the `Cf-Access-Jwt-Assertion` header; a browser also the `CF_Authorization` cookie). It is
 * verified here with `jose` (a maintained, dependency-free JOSE library that runs on Workers'
 * WebCrypto): RS256 only, against the team's published keys, `aud` = the application's audience
 * tag, `iss` = the team domain, `exp`/`nbf` checked. The key set is fetched once per isolate and
 * cached (src/lib/jwks.ts, its answer bounded in time and size); a token signed by a key the cache does
 * not hold (Access rotates every 6 weeks) makes jose refetch, at most once per cooldown.
 */
import { errors, jwtVerify, type JWTPayload } from "jose";
import { DomainError } from "../domain/errors";
import type { Env } from "../env";
import { remoteKeySet } from "../lib/jwks";
import { groupsIn, normalEmail, type Identity } from "./sso-mapping";

export const ACCESS_HEADER = "Cf-Access-Jwt-Assertion";
export const ACCESS_COOKIE = "CF_Authorization";

interface AccessConfig {
  issuer: string;
  audience: string;
  certs: string;
}

/** The deployment's Access application, or null when Access is not configured (both vars needed). */
export function accessConfig(env: Env): AccessConfig | null {
  const team = env.ACCESS_TEAM_DOMAIN?.trim();
  const audience = env.ACCESS_AUD?.trim();
  if (!team || !audience) return null;
  const host = team.replace(/^https?:\/\//, "").replace(/\/+$/, "");
  const issuer = `https://${host}`;
  return { issuer, audience, certs: `${issuer}/cdn-cgi/access/certs` };
}

const refused = (why: string) => new DomainError("unauthorized", `the Cloudflare Access assertion was refused: ${why}`);

function reasonOf(err: unknown): DomainError {
  if (err instanceof errors.JWTExpired) return refused("it has expired");
  if (err instanceof errors.JWTClaimValidationFailed)
    return refused(`its '${err.claim}' claim is not this application's`);
  if (err instanceof errors.JWKSTimeout || (err instanceof Error && !(err instanceof errors.JOSEError))) {
    return new DomainError(
      "identity_provider_unavailable",
      "Cloudflare Access's signing keys could not be fetched",
      undefined,
      {
        retryAfterS: 5,
      },
    );
  }
  if (err instanceof errors.JWKSNoMatchingKey) return refused("it is not signed by one of the team's keys");
  if (err instanceof errors.JWSSignatureVerificationFailed) return refused("its signature does not verify");
  if (err instanceof errors.JOSEAlgNotAllowed) return refused("it is not signed with RS256");
  return refused("it is not a valid JWT");
}

/** Groups, where the identity provider passes them through (top level, or Access's `custom` claims). */
function groupsOf(payload: JWTPayload): string[] {
  const custom = payload.custom as { groups?: unknown } | undefined;
  return groupsIn(Array.isArray(payload.groups) ? payload.groups : custom?.groups);
}

/** The verified identity of an Access JWT, and when it expires (ms); throws a refusal otherwise. */
export async function verifyAccessJwt(config: AccessConfig, jwt: string): Promise<{ who: Identity; exp: number }> {
  if (jwt.length > 16_384) throw refused("it is too long");
  let payload: JWTPayload;
  try {
    ({ payload } = await jwtVerify(jwt, remoteKeySet(config.certs), {
      issuer: config.issuer,
      audience: config.audience,
      algorithms: ["RS256"],
      requiredClaims: ["exp", "iat", "sub"],
    }));
  } catch (err) {
    throw reasonOf(err);
  }
  const email = typeof payload.email === "string" && payload.email.includes("@") ? normalEmail(payload.email) : null;
  return {
    who: { provider: "access", subject: String(payload.sub), email, groups: groupsOf(payload) },
    exp: (payload.exp as number) * 1000,
  };
}
