/**
 * OpenID Connect, authorization code flow with PKCE (S256), state and nonce, against any provider
 * that publishes a discovery document. The discovery document and the provider's keys are cached
 * per isolate; the ID token is verified with jose (signature against the provider's JWKS, `iss`,
 * `aud` = our client id, `exp`, and the nonce this sign-in sent).
 */
import { errors, jwtVerify, type JWTPayload } from "jose";
import { z } from "zod";
import { DomainError } from "../domain/errors";
import type { Env } from "../env";
import { textPrefix } from "../lib/body";
import { remoteKeySet } from "../lib/jwks";
import { groupsIn, normalEmail } from "../auth/sso-mapping";

export interface OidcConfig {
  issuer: string;
  clientId: string;
  clientSecret: string | null;
}

const LOOPBACK = new Set(["127.0.0.1", "localhost", "[::1]"]);

/** The deployment's provider, or null when OIDC sign-in is not configured. */
export function oidcConfig(env: Env): OidcConfig | null {
  const issuer = env.OIDC_ISSUER?.trim().replace(/\/+$/, "");
  const clientId = env.OIDC_CLIENT_ID?.trim();
  if (!issuer || !clientId) return null;
  const url = URL.parse(issuer);
  // https only: a plain-http issuer is accepted on a loopback address for local runs and tests.
  const local = env.ALLOW_LOOPBACK_HTTP === "1" && url?.protocol === "http:" && LOOPBACK.has(url.hostname);
  if (!url || (url.protocol !== "https:" && !local)) return null;
  const secret = (env as { OIDC_CLIENT_SECRET?: string }).OIDC_CLIENT_SECRET?.trim();
  return { issuer, clientId, clientSecret: secret || null };
}

const Discovery = z.object({
  issuer: z.string(),
  authorization_endpoint: z.url(),
  token_endpoint: z.url(),
  jwks_uri: z.url(),
  userinfo_endpoint: z.url().optional(),
});
type Discovery = z.infer<typeof Discovery>;

/**
 * How the provider is reached. Each answer is read within `timeoutMs` (the headers and the body:
 * a provider that answers its headers and then trickles would otherwise hold the sign-in open) and
 * no further than MAX_PROVIDER_ANSWER_BYTES, so a hostile or broken provider cannot stall or bloat
 * the worker. Tests pass their own fetch.
 */
export interface ProviderTransport {
  fetch: (url: string, init: RequestInit) => Promise<Response>;
  timeoutMs: number;
}
const GLOBAL_TRANSPORT: ProviderTransport = { fetch: (url, init) => fetch(url, init), timeoutMs: 5_000 };

/** Discovery documents, token answers and userinfo are a few KiB; ID tokens with many groups, tens. */
const MAX_PROVIDER_ANSWER_BYTES = 256 * 1024;

type Answer = { status: number; ok: boolean; body: unknown };

/** One call to the provider, its JSON answer read bounded (a body that is not JSON reads as null). */
async function ask(transport: ProviderTransport, url: string, init: RequestInit, timeoutMs: number): Promise<Answer> {
  const signal = AbortSignal.timeout(timeoutMs);
  const res = await transport.fetch(url, { ...init, signal });
  const { text, truncated } = await textPrefix(res, MAX_PROVIDER_ANSWER_BYTES, signal);
  if (truncated) throw new Error(`answer over ${MAX_PROVIDER_ANSWER_BYTES} bytes`);
  let body: unknown = null;
  try {
    body = JSON.parse(text);
  } catch {
    // not JSON: the callers judge a null body
  }
  return { status: res.status, ok: res.ok, body };
}

const DISCOVERY_TTL_MS = 600_000;
const discovered = new Map<string, { doc: Discovery; at: number }>();

const unavailable = (what: string) =>
  new DomainError("identity_provider_unavailable", `the OpenID provider ${what}`, undefined, { retryAfterS: 5 });

async function discover(config: OidcConfig, transport: ProviderTransport): Promise<Discovery> {
  const hit = discovered.get(config.issuer);
  if (hit && Date.now() - hit.at < DISCOVERY_TTL_MS) return hit.doc;
  let body: unknown;
  try {
    const res = await ask(
      transport,
      `${config.issuer}/.well-known/openid-configuration`,
      { headers: { accept: "application/json" } },
      transport.timeoutMs,
    );
    if (!res.ok) throw new Error(`HTTP ${res.status}`);
    body = res.body;
  } catch {
    throw unavailable("did not answer its discovery document");
  }
  const parsed = Discovery.safeParse(body);
  // The document must be the issuer's own (OpenID Connect Discovery §4.3).
  if (!parsed.success || parsed.data.issuer.replace(/\/+$/, "") !== config.issuer) {
    throw unavailable("published a discovery document that is not its own or not valid");
  }
  discovered.set(config.issuer, { doc: parsed.data, at: Date.now() });
  return parsed.data;
}

const b64url = (bytes: Uint8Array) =>
  btoa(String.fromCharCode(...bytes))
    .replace(/\+/g, "-")
    .replace(/\//g, "_")
    .replace(/=+$/, "");
export const randomToken = () => b64url(crypto.getRandomValues(new Uint8Array(32)));
export const s256 = async (verifier: string) =>
  b64url(new Uint8Array(await crypto.subtle.digest("SHA-256", new TextEncoder().encode(verifier))));

/** Where the browser goes to sign in: the provider's authorization endpoint with our parameters. */
export async function authorizeUrl(
  config: OidcConfig,
  p: { redirectUri: string; state: string; nonce: string; verifier: string },
  transport = GLOBAL_TRANSPORT,
) {
  const doc = await discover(config, transport);
  const url = new URL(doc.authorization_endpoint);
  url.search = new URLSearchParams({
    response_type: "code",
    client_id: config.clientId,
    redirect_uri: p.redirectUri,
    scope: "openid email profile",
    state: p.state,
    nonce: p.nonce,
    code_challenge: await s256(p.verifier),
    code_challenge_method: "S256",
  }).toString();
  return url.toString();
}

const TokenAnswer = z.object({ id_token: z.string(), access_token: z.string().optional() });

const refused = (why: string) => new DomainError("unauthorized", `the OpenID sign-in was refused: ${why}`);

const groupsOf = (claims: Record<string, unknown>) => groupsIn(claims.groups);

/**
 * The callback's code exchanged at the token endpoint (with the PKCE verifier), the ID token
 * verified, and the user's identity: email and groups from the ID token, else from userinfo.
 */
export async function identityFromCode(
  config: OidcConfig,
  p: { code: string; redirectUri: string; verifier: string; nonce: string },
  transport = GLOBAL_TRANSPORT,
) {
  const doc = await discover(config, transport);
  const headers: Record<string, string> = {
    "content-type": "application/x-www-form-urlencoded",
    accept: "application/json",
  };
  const form = new URLSearchParams({
    grant_type: "authorization_code",
    code: p.code,
    redirect_uri: p.redirectUri,
    code_verifier: p.verifier,
    client_id: config.clientId,
  });
  if (config.clientSecret) {
    const enc = (s: string) => encodeURIComponent(s);
    headers.authorization = `Basic ${btoa(`${enc(config.clientId)}:${enc(config.clientSecret)}`)}`;
  }
  let answer: z.infer<typeof TokenAnswer>;
  let res: Answer;
  try {
    // The token endpoint may sign and look up more than discovery does: twice the time.
    res = await ask(transport, doc.token_endpoint, { method: "POST", headers, body: form }, 2 * transport.timeoutMs);
  } catch {
    throw unavailable("token endpoint could not be reached or answered too much or too slowly");
  }
  const body = res.body;
  if (!res.ok) {
    const error = (body as { error?: unknown } | null)?.error;
    throw refused(`the provider refused the code (${typeof error === "string" ? error.slice(0, 100) : res.status})`);
  }
  const parsed = TokenAnswer.safeParse(body);
  if (!parsed.success) throw refused("the provider's answer has no ID token");
  answer = parsed.data;

  const keys = remoteKeySet(doc.jwks_uri);
  let claims: JWTPayload;
  try {
    ({ payload: claims } = await jwtVerify(answer.id_token, keys, {
      issuer: doc.issuer,
      audience: config.clientId,
      algorithms: ["RS256", "PS256", "ES256", "EdDSA"],
      requiredClaims: ["exp", "iat", "sub"],
    }));
  } catch (err) {
    if (err instanceof errors.JWTExpired) throw refused("the ID token has expired");
    // A JOSEError too, but the provider's keys not coming in time is not the token's fault.
    if (err instanceof errors.JWKSTimeout) throw unavailable("keys could not be fetched in time");
    if (err instanceof errors.JOSEError) throw refused("the ID token does not verify");
    throw unavailable("keys could not be fetched");
  }
  if (claims.nonce !== p.nonce) throw refused("the ID token is not for this sign-in (nonce)");

  let profile: Record<string, unknown> = claims;
  if (typeof claims.email !== "string" && doc.userinfo_endpoint && answer.access_token) {
    const info = await ask(
      transport,
      doc.userinfo_endpoint,
      { headers: { authorization: `Bearer ${answer.access_token}`, accept: "application/json" } },
      transport.timeoutMs,
    )
      .then((r) => (r.ok ? r.body : null))
      .catch(() => null);
    // Userinfo speaks for the same user only when its `sub` is the ID token's (OpenID Connect Core §5.3.2).
    if (info && typeof info === "object" && (info as { sub?: unknown }).sub === claims.sub) {
      profile = { ...(info as Record<string, unknown>), ...claims };
    }
  }
  const email =
    typeof profile.email === "string" && profile.email.includes("@") && profile.email_verified !== false
      ? normalEmail(profile.email)
      : null;
  return {
    who: { provider: "oidc" as const, subject: String(claims.sub), email, groups: groupsOf(profile) },
    exp: (claims.exp as number) * 1000,
  };
}
