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

/** Builds the ApiError for a failed response from its `{error:{code,message}}` body, if any. */
export async function apiErrorOf(res: Response): Promise<ApiError> {
  const text = await res.text().catch(() => "");
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
 * A signal that fires when `parent` does or when `settled` settles, whichever comes first: a loop
 * waiting on the network is woken by work that ended beside it. `woken` tells the two apart.
 */
export function wakeOn(
  parent: AbortSignal | undefined,
  settled: Promise<unknown> | null,
): { signal: AbortSignal | undefined; woken: () => boolean; done: () => void } {
  if (!settled) return { signal: parent, woken: () => false, done: () => {} };
  const controller = new AbortController();
  let woken = false;
  let live = true;
  const onAbort = () => controller.abort(parent?.reason);
  if (parent?.aborted) controller.abort(parent.reason);
  else parent?.addEventListener("abort", onAbort, { once: true });
  const wake = () => {
    if (!live || controller.signal.aborted) return;
    woken = true;
    controller.abort(new Error("woken"));
  };
  settled.then(wake, wake);
  return {
    signal: controller.signal,
    woken: () => woken,
    done: () => {
      live = false;
      parent?.removeEventListener("abort", onAbort);
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
