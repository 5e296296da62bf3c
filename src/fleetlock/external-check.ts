/**
 * One call of an external HTTPS check (a reboot gate's, a rollout analysis'): 2xx means it holds.
 * Bounded by its timeout, never follows a redirect, never reads the body. A check that cannot be
 * reached says so (`reachable: false`) and why, in words a page can show.
 */
export type Fetcher = (url: string, init: RequestInit) => Promise<Response>;

export interface ExternalAnswer {
  ok: boolean;
  reachable: boolean;
  detail: string;
  /** The HTTP status, when there was one. */
  status?: number;
}

export async function externalCheck(fetcher: Fetcher, url: string, timeoutS: number): Promise<ExternalAnswer> {
  try {
    const res = await fetcher(url, { method: "GET", redirect: "manual", signal: AbortSignal.timeout(timeoutS * 1000) });
    await res.body?.cancel();
    return {
      ok: res.status >= 200 && res.status < 300,
      reachable: true,
      detail: `HTTP ${res.status}`,
      status: res.status,
    };
  } catch (err) {
    return { ok: false, reachable: false, detail: fetchFailure(err, timeoutS) };
  }
}

/** Why a fetch failed, in words: a timeout names its bound. */
export function fetchFailure(err: unknown, timeoutS: number): string {
  const e = err as { name?: string; message?: string };
  return e?.name === "TimeoutError" ? `no answer within ${timeoutS} s` : String(e?.message ?? err).slice(0, 200);
}
