import { retryAfterMs } from "./backoff.ts";

/** A non-2xx answer from Harbormaster, with the API's error code when it sent one. */
export class ApiError extends Error {
  readonly status: number;
  readonly code: string;
  /** From Retry-After, when the server asked the client to come back later. */
  readonly retryAfterMs: number | null;
  readonly details?: unknown;

  constructor(status: number, code: string, message: string, retryAfterMs: number | null = null, details?: unknown) {
    super(message);
    this.status = status;
    this.code = code;
    this.retryAfterMs = retryAfterMs;
    this.details = details;
    this.name = "ApiError";
  }
}

export type FetchLike = (input: string | URL | Request, init?: RequestInit) => Promise<Response>;

/** The most of an error's body read: Harbormaster's are a few hundred bytes. */
export const MAX_ERROR_BODY_BYTES = 64 * 1024;

/**
 * At most `max` bytes of a body as text, the rest cancelled unread: a proxy's error page streamed
 * without end (or a gigabyte of it) is not held in memory.
 */
export async function textUpTo(res: Response, max: number): Promise<string> {
  if (!res.body) return "";
  const reader = res.body.getReader();
  const chunks: Uint8Array[] = [];
  let size = 0;
  try {
    while (size < max) {
      const { done, value } = await reader.read();
      if (done) break;
      const part = value.subarray(0, max - size);
      chunks.push(part);
      size += part.length;
    }
  } catch {
    // A body cut short (the request's timeout, a reset): what was read says what it can.
  } finally {
    if (size >= max) await reader.cancel().catch(() => {});
  }
  const all = new Uint8Array(size);
  let at = 0;
  for (const c of chunks) {
    all.set(c, at);
    at += c.length;
  }
  return new TextDecoder().decode(all);
}

/**
 * How every call of the agent to the control plane treats a redirect: as an answer, never
 * followed. The server redirects no host call; fetch() would follow one by itself and, to another
 * origin, drop the token on the way: whatever answered there (a desired config, a report's
 * acceptance, an image's bytes, an enrollment) would come from no one the agent authenticated to,
 * yet be acted on. apiErrorOf() turns the 3xx into an error naming where it pointed.
 */
export const NO_REDIRECTS = { redirect: "manual" } as const satisfies RequestInit;

/** Builds the ApiError for a failed response from its `{error:{code,message}}` body, if any. */
export async function apiErrorOf(res: Response): Promise<ApiError> {
  if (res.status >= 300 && res.status < 400) {
    await res.body?.cancel().catch(() => {});
    const to = res.headers.get("Location");
    return new ApiError(
      res.status,
      "redirected",
      `the server answered ${res.status} with a redirect${to ? ` to ${to.slice(0, 300)}` : ""}; the agent follows none ` +
        `(a proxy or a moved server in front of it? the URL it joined with is the one it calls)`,
      retryAfterMs(res.headers.get("Retry-After")),
    );
  }
  const text = await textUpTo(res, MAX_ERROR_BODY_BYTES);
  let code = `http_${res.status}`;
  let message = text.slice(0, 500) || res.statusText || `HTTP ${res.status}`;
  let details: unknown;
  try {
    const body = JSON.parse(text);
    if (body?.error?.code) {
      code = String(body.error.code);
      message = String(body.error.message ?? message);
      details = body.error.details;
    }
  } catch {
    // Not JSON (a proxy's error page, say): keep the status as the code.
  }
  return new ApiError(res.status, code, message, retryAfterMs(res.headers.get("Retry-After")), details);
}

/** An AbortSignal that fires when `parent` does or after `ms`, whichever comes first. */
export function withTimeout(parent: AbortSignal | undefined, ms: number): { signal: AbortSignal; done: () => void } {
  const controller = new AbortController();
  const onAbort = () => controller.abort(parent?.reason);
  if (parent?.aborted) controller.abort(parent.reason);
  else parent?.addEventListener("abort", onAbort, { once: true });
  const timer = setTimeout(() => controller.abort(new Error(`request timed out after ${ms} ms`)), ms);
  return {
    signal: controller.signal,
    done: () => {
      clearTimeout(timer);
      parent?.removeEventListener("abort", onAbort);
    },
  };
}

/**
 * A signal that fires when `parent` does or when `ended` does (at once if it already has),
 * whichever comes first: a loop waiting on the network is woken by work that ended beside it.
 * `woken` tells the two apart. `done` removes both listeners: a pass that outlasts many polls
 * does not collect one per poll.
 */
export function wakeOn(
  parent: AbortSignal | undefined,
  ended: AbortSignal | null,
): { signal: AbortSignal | undefined; woken: () => boolean; done: () => void } {
  if (!ended) return { signal: parent, woken: () => false, done: () => {} };
  const controller = new AbortController();
  let woken = false;
  const onAbort = () => controller.abort(parent?.reason);
  const wake = () => {
    if (controller.signal.aborted) return;
    woken = true;
    controller.abort(new Error("woken"));
  };
  if (parent?.aborted) controller.abort(parent.reason);
  else parent?.addEventListener("abort", onAbort, { once: true });
  if (ended.aborted) wake();
  else ended.addEventListener("abort", wake, { once: true });
  return {
    signal: controller.signal,
    woken: () => woken,
    done: () => {
      parent?.removeEventListener("abort", onAbort);
      ended.removeEventListener("abort", wake);
    },
  };
}

/** Resolves after `ms`, or at once (rejecting) when the signal aborts. */
export function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) return reject(signal.reason ?? new Error("aborted"));
    const onAbort = () => {
      clearTimeout(timer);
      reject(signal!.reason ?? new Error("aborted"));
    };
    const timer = setTimeout(() => {
      signal?.removeEventListener("abort", onAbort);
      resolve();
    }, ms);
    signal?.addEventListener("abort", onAbort, { once: true });
  });
}
