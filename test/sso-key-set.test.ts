import { createExecutionContext, env, waitOnExecutionContext } from "cloudflare:test";
import { afterEach, describe, expect, it, vi } from "vitest";
import { exportJWK, generateKeyPair, SignJWT, type CryptoKey, type JWK } from "jose";
import { createApp } from "../src/app";
import { MAX_KEY_SET_BYTES } from "../src/lib/jwks";
import { uniq } from "./helpers";

/**
 * A Cloudflare Access team (a team domain of its own, so the isolate's key-set cache is fresh)
 * whose certs endpoint answers what each test says; an API request carrying the team's assertion.
 */
const realFetch = globalThis.fetch;

async function team(answer: (keys: JWK[]) => Response) {
  const host = `${uniq("team")}.cloudflareaccess.com`;
  const { privateKey, publicKey } = await generateKeyPair("RS256", { extractable: true });
  const kid = uniq("kid");
  const keys = [{ ...(await exportJWK(publicKey)), kid, alg: "RS256", use: "sig" }];
  vi.spyOn(globalThis, "fetch").mockImplementation(async (input, init) => {
    const url = input instanceof Request ? input.url : String(input);
    return url === `https://${host}/cdn-cgi/access/certs` ? answer(keys) : realFetch(input, init);
  });
  const jwt = await sign(privateKey, kid, `https://${host}`);
  return async () => {
    const ctx = createExecutionContext();
    const started = Date.now();
    const res = await createApp().request(
      "https://hm.test/v1/fleets",
      { headers: { "Cf-Access-Jwt-Assertion": jwt } },
      { ...env, ACCESS_TEAM_DOMAIN: host },
      ctx,
    );
    await waitOnExecutionContext(ctx);
    return { status: res.status, body: (await res.json()) as { error?: { code: string } }, ms: Date.now() - started };
  };
}

function sign(key: CryptoKey, kid: string, issuer: string) {
  const now = Math.floor(Date.now() / 1000);
  return new SignJWT({ sub: crypto.randomUUID(), email: "nobody@example.com" })
    .setProtectedHeader({ alg: "RS256", kid })
    .setIssuer(issuer)
    .setAudience(env.ACCESS_AUD!)
    .setIssuedAt(now - 5)
    .setExpirationTime(now + 600)
    .sign(key);
}

/** A body of `chunks` pieces of 16 KiB, counting what was read of it. */
function streamed(prefix: string, chunks: number, read: { bytes: number }) {
  const piece = new TextEncoder().encode(" ".repeat(16_384));
  let sent = 0;
  return new ReadableStream<Uint8Array>({
    pull(c) {
      if (sent === 0) c.enqueue(new TextEncoder().encode(prefix));
      if (sent++ >= chunks) return c.close();
      read.bytes += piece.byteLength;
      c.enqueue(piece);
    },
  });
}

afterEach(() => vi.restoreAllMocks());

describe("Cloudflare Access's key set, read as an outsider's answer", () => {
  it("refuses a key set larger than the bound as the provider being unavailable, reading little of it", async () => {
    const read = { bytes: 0 };
    // Valid keys followed by 8 MiB of whitespace: valid JSON that jose would take whole.
    const ask = await team((keys) => {
      const json = JSON.stringify({ keys });
      return new Response(streamed(json, 512, read), { headers: { "content-type": "application/json" } });
    });
    const res = await ask();
    expect([res.status, res.body.error?.code]).toEqual([503, "identity_provider_unavailable"]);
    expect(read.bytes).toBeLessThanOrEqual(MAX_KEY_SET_BYTES + 32_768);
  });

  it("takes a key set within the bound: the assertion verifies (no mapping names this user: 403)", async () => {
    const ask = await team((keys) => Response.json({ keys, note: "x".repeat(MAX_KEY_SET_BYTES / 2) }));
    const res = await ask();
    expect([res.status, res.body.error?.code]).toEqual([403, "forbidden"]);
  });

  it("gives up on a key set whose body stops coming within the fetch's deadline", { timeout: 20_000 }, async () => {
    const ask = await team(
      (keys) =>
        new Response(
          new ReadableStream({
            start: (c) => c.enqueue(new TextEncoder().encode(JSON.stringify({ keys }).slice(0, 20))),
          }),
        ),
    );
    const res = await ask();
    expect([res.status, res.body.error?.code]).toEqual([503, "identity_provider_unavailable"]);
    expect(res.ms).toBeLessThan(8_000);
  });
});

describe("Cloudflare Access's key set endpoint failing", () => {
  it("answers 503, not a refused assertion, when the certs endpoint answers an error", async () => {
    const ask = await team(() => new Response("upstream connect error", { status: 502 }));
    const res = await ask();
    expect([res.status, res.body.error?.code]).toEqual([503, "identity_provider_unavailable"]);
  });

  it("answers 503, not a refused assertion, when the certs endpoint answers JSON that is no key set", async () => {
    const ask = await team(() => Response.json({ error: "temporarily unavailable" }));
    const res = await ask();
    expect([res.status, res.body.error?.code]).toEqual([503, "identity_provider_unavailable"]);
  });

  it("answers 503, not a refused assertion, when the certs endpoint answers a page that is not JSON", async () => {
    const ask = await team(
      () => new Response("<html>maintenance</html>", { headers: { "content-type": "text/html" } }),
    );
    const res = await ask();
    expect([res.status, res.body.error?.code]).toEqual([503, "identity_provider_unavailable"]);
  });
});
