import { MAX_ERROR_BODY_BYTES, textUpTo, withTimeout, type FetchLike } from "./http.ts";

/**
 * The longest a FleetLock call may take. A server that takes the request and never answers (or
 * stalls its body) would otherwise hold the reboot coordinator for good: no slot asked again, and
 * after a reboot, the slot never given back, which holds every other host of the group.
 */
const FLEETLOCK_TIMEOUT_MS = 30_000;

/** Redirects followed for one call: as many as Zincati's HTTP client (reqwest) follows by default. */
const MAX_REDIRECTS = 10;

export type FleetLockResult =
  | { ok: true; status: number }
  /** A refusal: the server's `{kind, value}`, or `generic_http_<status>` when the body is not one (as Zincati does). */
  | { ok: false; status: number; kind: string; value: string };

/**
 * A FleetLock client that sends exactly what Zincati sends (coreos/zincati src/fleet_lock): a POST
 * to `v1/pre-reboot` or `v1/steady-state` resolved against `base_url` (so its trailing slash
 * matters), the header `fleet-lock-protocol: true`, and the body
 * `{"client_params":{"id","group"}}` pretty-printed with two-space indents and no Content-Type.
 */
export class FleetLockClient {
  readonly params: { id: string; group?: string };
  private readonly fetchImpl: FetchLike;
  readonly body: Uint8Array;
  private readonly base: URL;
  private readonly timeoutMs: number;

  constructor(
    baseUrl: string,
    params: { id: string; group?: string },
    fetchImpl: FetchLike = (i, init) => fetch(i, init),
    timeoutMs = FLEETLOCK_TIMEOUT_MS,
  ) {
    this.params = params;
    this.fetchImpl = fetchImpl;
    this.timeoutMs = timeoutMs;
    this.base = new URL(baseUrl);
    // Zincati would resolve v1/… against the parent path and reach the wrong place: refuse early.
    if (!this.base.pathname.endsWith("/")) throw new Error(`FleetLock base_url must end with '/': ${baseUrl}`);
    const group = params.group ?? "default";
    if (!group) throw new Error("missing group value");
    if (!params.id) throw new Error("missing client id");
    // Bytes, not a string: fetch would otherwise add `Content-Type: text/plain`, which Zincati never sends.
    this.body = new TextEncoder().encode(JSON.stringify({ client_params: { id: params.id, group } }, null, 2));
  }

  /** RecursiveLock: take a reboot slot (an id that already holds one gets it again). */
  preReboot(signal?: AbortSignal) {
    return this.post("v1/pre-reboot", signal);
  }

  /** UnlockIfHeld: give the slot back, if held; succeeds either way. */
  steadyState(signal?: AbortSignal) {
    return this.post("v1/steady-state", signal);
  }

  /**
   * Follows a 307 or 308 (which keep the POST and its body) to an http(s) URL, as Zincati does:
   * an ingress that answers `http://` with a redirect to `https://` is a working setup. FleetLock
   * carries no credential to lose on the way (the key is in the URL, which the redirect names
   * anew), and whatever answers at the end is the lock's answer, as it would be for Zincati. A
   * 301, 302 or 303 is not followed: fetch (and reqwest) would turn the POST into a GET, and a
   * GET's 200 (a login page's, say) would be taken for a slot.
   */
  private async post(path: string, signal?: AbortSignal): Promise<FleetLockResult> {
    const t = withTimeout(signal, this.timeoutMs);
    let url = new URL(path, this.base);
    let res: Response;
    let text: string;
    let refused: string | null = null;
    try {
      for (let hops = 0; ; hops++) {
        res = await this.fetchImpl(url.toString(), {
          // Followed below, and only where the same request may go again.
          redirect: "manual",
          method: "POST",
          headers: { "fleet-lock-protocol": "true" },
          body: this.body,
          signal: t.signal,
        });
        const to = res.headers.get("Location");
        // Not a redirect (or one naming nowhere): answered as it stands.
        if (res.status < 300 || res.status >= 400 || to === null) break;
        const next = httpUrl(to, url);
        const said = `answered ${res.status} with a redirect to ${to.slice(0, 300)}, not followed`;
        if (res.status !== 307 && res.status !== 308) refused = `${said} (it would make the POST a GET)`;
        else if (!next) refused = `${said} (not an http(s) URL)`;
        else if (hops === MAX_REDIRECTS) refused = `${said}: more than ${MAX_REDIRECTS} redirects in a row`;
        if (refused !== null || !next) break;
        await res.body?.cancel().catch(() => {});
        url = next;
      }
      text = await textUpTo(res, MAX_ERROR_BODY_BYTES);
    } finally {
      t.done();
    }
    if (res.ok) return { ok: true, status: res.status };
    if (refused !== null) return { ok: false, status: res.status, kind: "redirected", value: refused };
    try {
      const body = JSON.parse(text);
      if (typeof body?.kind === "string" && typeof body?.value === "string") {
        return { ok: false, status: res.status, kind: body.kind, value: body.value };
      }
    } catch {
      // fall through to the generic rejection
    }
    return { ok: false, status: res.status, kind: `generic_http_${res.status}`, value: "(unknown server error)" };
  }
}

/** `to` resolved against `base`, when it is an http(s) URL (a `data:` URL would answer 200 by itself). */
function httpUrl(to: string, base: URL): URL | null {
  try {
    const url = new URL(to, base);
    return url.protocol === "http:" || url.protocol === "https:" ? url : null;
  } catch {
    return null;
  }
}
