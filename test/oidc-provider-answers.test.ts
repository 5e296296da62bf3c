/**
 * What an OpenID provider answers is read bounded and on a deadline: a provider that answers an
 * endless body, stops halfway through one, or never answers costs a sign-in one small prefix and
 * one timeout, then a clear 503-class refusal.
 */
import { afterEach, describe, expect, it, vi } from "vitest";
import { generateKeyPair, SignJWT } from "jose";
import { endless } from "./support/streams";
import { authorizeUrl, identityFromCode, type ProviderTransport } from "../src/sso/oidc";

const MiB = 1024 * 1024;

/** A body that sends its first bytes and then nothing, ever. */
function stalled() {
  const seen = { cancelled: false };
  const body = new ReadableStream<Uint8Array>({
    start(controller) {
      controller.enqueue(new TextEncoder().encode('{"issuer":'));
    },
    pull() {
      return new Promise(() => {});
    },
    cancel() {
      seen.cancelled = true;
    },
  });
  return { body, seen };
}

let n = 0;
/** A fresh issuer per test: discovery documents are cached per isolate by issuer. */
const config = () => ({ issuer: `https://idp-${++n}.example`, clientId: "hm", clientSecret: null });
const signIn = { redirectUri: "https://hm.example/console/sso/callback", state: "s", nonce: "n", verifier: "v" };

function discovery(issuer: string) {
  return Response.json({
    issuer,
    authorization_endpoint: `${issuer}/authorize`,
    token_endpoint: `${issuer}/token`,
    jwks_uri: `${issuer}/jwks`,
  });
}

async function refusal(p: Promise<unknown>) {
  const err = await p.then(
    () => null,
    (e: unknown) => e as { code?: string; message?: string },
  );
  expect(err).not.toBeNull();
  return err!;
}

describe("an OpenID provider's answers, read bounded and on a deadline", () => {
  it("still signs in against a provider that answers normally", async () => {
    const c = config();
    const transport: ProviderTransport = { fetch: async () => discovery(c.issuer), timeoutMs: 1_000 };
    const url = new URL(await authorizeUrl(c, signIn, transport));
    expect(url.origin + url.pathname).toBe(`${c.issuer}/authorize`);
    expect(url.searchParams.get("client_id")).toBe("hm");
  });

  it("refuses a 64 MB discovery document after reading at most a small prefix", async () => {
    const big = endless(64 * MiB, 0x20);
    const transport: ProviderTransport = { fetch: async () => new Response(big.body), timeoutMs: 5_000 };
    const err = await refusal(authorizeUrl(config(), signIn, transport));
    expect(err.code).toBe("identity_provider_unavailable");
    expect(big.seen.pulled).toBeLessThanOrEqual(512 * 1024);
    expect(big.seen.cancelled).toBe(true);
  });

  it("gives up on a discovery document whose body stops coming, within the timeout", async () => {
    const slow = stalled();
    const transport: ProviderTransport = { fetch: async () => new Response(slow.body), timeoutMs: 300 };
    const started = Date.now();
    const err = await refusal(authorizeUrl(config(), signIn, transport));
    expect(err.code).toBe("identity_provider_unavailable");
    expect(Date.now() - started).toBeLessThan(3_000);
    expect(slow.seen.cancelled).toBe(true);
  });

  it("gives up on a provider that never answers, within the timeout", async () => {
    const hanging: ProviderTransport = {
      fetch: (_url, init) =>
        new Promise((_resolve, reject) => init.signal?.addEventListener("abort", () => reject(init.signal?.reason))),
      timeoutMs: 300,
    };
    const started = Date.now();
    const err = await refusal(authorizeUrl(config(), signIn, hanging));
    expect(err.code).toBe("identity_provider_unavailable");
    expect(Date.now() - started).toBeLessThan(3_000);
  });

  it("refuses a 64 MB token answer, and one that stalls, as the provider being unavailable", async () => {
    const code = { code: "c", redirectUri: signIn.redirectUri, verifier: "v", nonce: "n" };
    const big = endless(64 * MiB, 0x20);
    const c1 = config();
    const huge: ProviderTransport = {
      fetch: async (url) => (url.endsWith("/token") ? new Response(big.body) : discovery(c1.issuer)),
      timeoutMs: 5_000,
    };
    const err = await refusal(identityFromCode(c1, code, huge));
    expect(err.code).toBe("identity_provider_unavailable");
    expect(big.seen.pulled).toBeLessThanOrEqual(512 * 1024);
    expect(big.seen.cancelled).toBe(true);

    const slow = stalled();
    const c2 = config();
    const stalling: ProviderTransport = {
      fetch: async (url) => (url.endsWith("/token") ? new Response(slow.body) : discovery(c2.issuer)),
      timeoutMs: 200,
    };
    const started = Date.now();
    const err2 = await refusal(identityFromCode(c2, code, stalling));
    expect(err2.code).toBe("identity_provider_unavailable");
    expect(Date.now() - started).toBeLessThan(3_000);
    expect(slow.seen.cancelled).toBe(true);
  });
});

describe("an OpenID provider's signing keys failing", () => {
  afterEach(() => vi.restoreAllMocks());
  const code = { code: "c", redirectUri: signIn.redirectUri, verifier: "v", nonce: "n" };

  /** A provider whose token endpoint answers a well-formed ID token and whose jwks_uri answers `keys`. */
  async function provider(keys: (init?: RequestInit) => Promise<Response>) {
    const c = config();
    const { privateKey } = await generateKeyPair("RS256");
    const now = Math.floor(Date.now() / 1000);
    const idToken = await new SignJWT({ nonce: "n" })
      .setProtectedHeader({ alg: "RS256", kid: "k1" })
      .setSubject("someone")
      .setIssuer(c.issuer)
      .setAudience(c.clientId)
      .setIssuedAt(now)
      .setExpirationTime(now + 300)
      .sign(privateKey);
    const realFetch = globalThis.fetch;
    vi.spyOn(globalThis, "fetch").mockImplementation(async (input, init) => {
      const url = input instanceof Request ? input.url : String(input);
      return url === `${c.issuer}/jwks` ? keys(init) : realFetch(input, init);
    });
    const transport: ProviderTransport = {
      fetch: async (url) => (url.endsWith("/token") ? Response.json({ id_token: idToken }) : discovery(c.issuer)),
      timeoutMs: 1_000,
    };
    return () => identityFromCode(c, code, transport);
  }

  it("calls a key set answering an error status the provider being unavailable, not a refused sign-in", async () => {
    const signInWith = await provider(async () => new Response("bad gateway", { status: 502 }));
    expect((await refusal(signInWith())).code).toBe("identity_provider_unavailable");
  });

  it(
    "calls a key set that never answers the provider being unavailable, within jose's deadline",
    { timeout: 15_000 },
    async () => {
      const signInWith = await provider(
        (init) =>
          new Promise((_resolve, reject) => init?.signal?.addEventListener("abort", () => reject(init.signal?.reason))),
      );
      const started = Date.now();
      expect((await refusal(signInWith())).code).toBe("identity_provider_unavailable");
      expect(Date.now() - started).toBeLessThan(8_000);
    },
  );
});
