import type { ContentfulStatusCode } from "hono/utils/http-status";

/** A failure the client can act on; rendered as `{ error: { code, message, details? } }`. */
export class ApiError extends Error {
  constructor(
    readonly status: ContentfulStatusCode,
    readonly code: string,
    message: string,
    readonly details?: unknown,
    readonly headers?: Record<string, string>,
  ) {
    super(message);
  }
}

export const errorBody = (code: string, message: string, details?: unknown) => ({
  error: details === undefined ? { code, message } : { code, message, details },
});

export const notFound = (what: string, id: string) =>
  new ApiError(404, "not_found", `${what} '${id}' does not exist`);

/** How Durable Object RPCs report a client's mistake: as a value, since errors crossing RPC lose their shape. */
export type RpcFailure = { ok: false; status: ContentfulStatusCode; code: string; message: string; details?: unknown };

/** The success of an RPC result, or its failure thrown as the ApiError it describes. */
export function unwrap<R extends { ok: boolean }>(result: R): Exclude<R, { ok: false }> {
  if (!result.ok) {
    const f = result as unknown as RpcFailure;
    throw new ApiError(f.status, f.code, f.message, f.details);
  }
  return result as Exclude<R, { ok: false }>;
}
