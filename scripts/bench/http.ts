// What the scenarios that build large fleets share: a JSON call with a token, a check of its
// answer, and a pool that keeps a few requests in flight.
import type { BenchContext } from "./run.ts";

/** A request to the bench server with the admin token (or `token`). */
export const apiOf =
  (ctx: BenchContext) =>
  (path: string, method = "GET", body?: unknown, token = ctx.admin) =>
    fetch(`${ctx.base}${path}`, {
      method,
      headers: { authorization: `Bearer ${token}`, ...(body ? { "content-type": "application/json" } : {}) },
      body: body ? JSON.stringify(body) : undefined,
    });

/** The answer's JSON, or an error naming what failed. */
export async function ok(res: Response, what: string) {
  if (!res.ok) throw new Error(`${what}: ${res.status} ${await res.text()}`);
  return res.json() as Promise<any>;
}

/** Runs `fn` over `items` with at most `n` at once. */
export async function pool<T>(items: T[], n: number, fn: (item: T, i: number) => Promise<void>) {
  let next = 0;
  await Promise.all(
    Array.from({ length: n }, async () => {
      while (next < items.length) {
        const i = next++;
        await fn(items[i], i);
      }
    }),
  );
}
