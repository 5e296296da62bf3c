/**
 * The typed client for Harbormaster's API, shared by tests, benchmarks, the CLI and the simulator.
 * It runs anywhere `fetch` does (Node ≥ 18, workerd, browsers): the worker's code is imported for
 * its types only, so nothing of the worker is loaded at run time.
 *
 *   const hm = createClient("http://127.0.0.1:8787", process.env.HM_TOKEN);
 *   const res = await hm.v1.servers[":id"].$get({ param: { id } });
 *   if (res.ok) console.log((await res.json()).status);
 */
import { hc, type ClientRequestOptions } from "hono/client";
import type { AppType } from "../app";

export type Client = ReturnType<typeof hc<AppType>>;

export interface ClientOptions {
  /** A fetch to send requests with (tests pass SELF.fetch; default: the global fetch). */
  fetch?: ClientRequestOptions["fetch"];
  /** Extra headers on every request (e.g. X-Request-Id). */
  headers?: Record<string, string>;
}

/**
 * A client for the API at `baseUrl` (e.g. `https://harbormaster.example.com`) that sends
 * `Authorization: Bearer <token>` on every request when a token is given: an operator token for
 * /v1 operator routes, a server token for /v1/agent/*, none for /healthz and FleetLock.
 */
export function createClient(baseUrl: string, token?: string | null, options: ClientOptions = {}): Client {
  const headers: Record<string, string> = { ...options.headers };
  if (token) headers.Authorization = `Bearer ${token}`;
  return hc<AppType>(baseUrl.replace(/\/+$/, ""), { headers, ...(options.fetch ? { fetch: options.fetch } : {}) });
}

/** The body of an error answer (`{error: {code, message, details?, request_id?}}`), or null when it is not one. */
export async function errorOf(res: {
  ok: boolean;
  clone(): { json(): Promise<unknown> };
}): Promise<{ code: string; message: string; details?: unknown } | null> {
  if (res.ok) return null;
  try {
    const body = (await res.clone().json()) as { error?: { code: string; message: string; details?: unknown } };
    return body?.error ?? null;
  } catch {
    return null;
  }
}
