/**
 * An identity provider's published signing keys (Cloudflare Access's certs, an OpenID provider's
 * jwks_uri), fetched by jose's `createRemoteJWKSet` and kept per isolate: 10 minutes' cache, at
 * most one refetch per 30 s for a key id the cache does not hold (so made-up key ids cannot flood
 * the provider). jose bounds the fetch by `timeoutDuration` but reads whatever body comes with
 * `response.json()`; its `customFetch` hook lets the answer be read the way every outsider's is
 * (src/lib/body.ts): at most MAX_KEY_SET_BYTES, within the same deadline as the headers.
 */
import { createRemoteJWKSet, customFetch, type FetchImplementation } from "jose";
import { textPrefix } from "../lib/body";

/** A key set is a few keys of a few hundred bytes each; Access publishes two or three. */
export const MAX_KEY_SET_BYTES = 64 * 1024;
/** The whole answer, headers and body, within this (jose's own default, said here). */
const KEY_SET_TIMEOUT_MS = 5_000;

/**
 * The answer with its body read bounded. An error status, a larger body, or one that is not JSON
 * or not a key set throws a plain Error, which callers take for a provider that could not be
 * reached (as a timeout), not for a token that does not verify: jose would call each a JOSEError,
 * the same class as a bad signature, and a signed-in user would be told their assertion is
 * refused while the provider is down.
 */
const boundedFetch =
  (fetcher: typeof fetch): FetchImplementation =>
  async (url, init) => {
    const res = await fetcher(url, init);
    if (res.status !== 200) {
      // Nothing of it is read or kept.
      await res.body?.cancel().catch(() => {});
      throw new Error(`the key set at ${url} answered ${res.status}`);
    }
    const { text, truncated } = await textPrefix(res, MAX_KEY_SET_BYTES, init.signal);
    if (truncated) throw new Error(`the key set at ${url} is over ${MAX_KEY_SET_BYTES} bytes`);
    let doc: unknown;
    try {
      doc = JSON.parse(text);
    } catch {
      throw new Error(`the key set at ${url} is not JSON`);
    }
    // jose's own test of a key set's shape: without `keys`, an error document, not a key set.
    const keys = (doc as { keys?: unknown } | null)?.keys;
    if (!Array.isArray(keys) || !keys.every((k) => typeof k === "object" && k !== null))
      throw new Error(`the key set at ${url} has no keys`);
    return new Response(text, { status: 200, headers: { "content-type": "application/json" } });
  };

const keySets = new Map<string, ReturnType<typeof createRemoteJWKSet>>();

/** The key set published at `url`, one per isolate. */
export function remoteKeySet(url: string) {
  let set = keySets.get(url);
  if (!set) {
    set = createRemoteJWKSet(new URL(url), {
      cacheMaxAge: 600_000,
      cooldownDuration: 30_000,
      timeoutDuration: KEY_SET_TIMEOUT_MS,
      // Late-bound: the global fetch as it is at the call (tests stand in for the provider).
      [customFetch]: boundedFetch((u, i) => fetch(u, i)),
    });
    keySets.set(url, set);
  }
  return set;
}
