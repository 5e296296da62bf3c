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
 * The answer with its body read bounded. A larger one throws a plain Error, which callers take for
 * a provider that could not be reached (as a timeout), not for a token that does not verify.
 */
const boundedFetch =
  (fetcher: typeof fetch): FetchImplementation =>
  async (url, init) => {
    const res = await fetcher(url, init);
    if (res.status !== 200) {
      // jose refuses it without reading it: nothing of it is kept.
      await res.body?.cancel().catch(() => {});
      return new Response(null, { status: res.status });
    }
    const { text, truncated } = await textPrefix(res, MAX_KEY_SET_BYTES, init.signal);
    if (truncated) throw new Error(`the key set at ${url} is over ${MAX_KEY_SET_BYTES} bytes`);
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
