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
