import type { Context } from "hono";

/** Work a request leaves running after its answer. */
export interface Background {
  waitUntil(p: Promise<unknown>): void;
}

/**
 * The request's execution context as a service takes it, read only when the service hands work
 * to it: hono throws on reading a context a request lacks (a direct `app.request` in a test).
 */
export const backgroundOf = (c: Context): Background => ({ waitUntil: (p) => c.executionCtx.waitUntil(p) });
