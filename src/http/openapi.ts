import { z } from "@hono/zod-openapi";

const ErrorBody = z.object({
  code: z.string().openapi({ example: "validation_failed" }),
  message: z.string(),
  details: z.unknown().optional(),
  request_id: z.string().optional().openapi({ description: "The request's X-Request-Id, to find it in the logs" }),
});

/** The one error answer of the API (src/http/errors.ts renders every failure so). */
export const ErrorSchema = z.object({ error: ErrorBody }).openapi("Error");

/**
 * The one error answer with its `details` declared, for a code whose details clients read: the
 * same body as `Error` otherwise, named `name` in the document.
 */
export const errorWithDetails = <T extends z.ZodType>(name: string, details: T) =>
  z.object({ error: ErrorBody.extend({ details }) }).openapi(name);

/** An error answer: the shared body (or `errorWithDetails`'s), what it means, and headers it carries. */
export const errorResponse = (description: string, headers?: z.ZodObject, schema: z.ZodType = ErrorSchema) => ({
  description,
  ...(headers ? { headers } : {}),
  content: { "application/json": { schema } },
});

const wwwAuthenticate = z.object({
  "WWW-Authenticate": z
    .string()
    .openapi({ description: "The scheme to authenticate with", example: 'Bearer realm="harbormaster"' }),
});
const retryAfter = z.object({
  "Retry-After": z.string().openapi({ description: "Seconds to wait before retrying", example: "10" }),
});

/** The error answers every /v1 route can give; listed once for the document. */
export const commonErrors = {
  400: errorResponse(
    "The request is malformed or fails validation (`invalid_query` names unknown query parameters); nothing changed",
  ),
  401: errorResponse("Missing or invalid bearer token", wwwAuthenticate),
  403: errorResponse("The token's scope or owner does not allow this"),
  413: errorResponse("The body is over 1 MiB (`payload_too_large`)"),
  415: errorResponse(
    "The body is not JSON (`unsupported_media_type`), or declares a content coding (`unsupported_content_encoding`) or a charset other than UTF-8 (`unsupported_charset`)",
  ),
  503: errorResponse("Data upgrade in progress (`upgrade_in_progress`); retry after the Retry-After delay", retryAfter),
} as const;

export const notFoundError = { 404: errorResponse("No such resource") } as const;
/** A 404 whose description says what this route finds missing. */
export const notFoundBecause = (what: string) => ({ 404: errorResponse(what) }) as const;
/** A filter naming a server by hostname: none is named so (404), or several are (409 ambiguous_server). */
export const serverNameErrors = {
  404: errorResponse("No server has this hostname (not_found)"),
  409: errorResponse("The hostname names servers in several fleets (ambiguous_server lists them): add the fleet"),
} as const;
export const conflictError = (what: string) => ({ 409: errorResponse(what) }) as const;
export const preconditionError = (what: string) => ({ 412: errorResponse(what) }) as const;
/** A 422: the request is well-formed but names what cannot be used (an unknown fleet, no ready image…). */
export const unprocessableError = (what: string) => ({ 422: errorResponse(what) }) as const;

export const jsonBody = <T extends z.ZodType>(schema: T) => ({
  required: true,
  content: { "application/json": { schema } },
});

export const jsonResponse = <T extends z.ZodType>(schema: T, description: string) => ({
  description,
  content: { "application/json": { schema } },
});

/** `ETag` on an answer, with what the tag stands for. */
export const etagHeader = (description: string) => z.object({ ETag: z.string().openapi({ description }) });

/** The `Location` header of a 201: the created resource's URL. */
export const locationHeader = (description = "The created resource's URL") =>
  z.object({ Location: z.string().openapi({ description, example: "/v1/fleets/prod" }) });

/** A 201 for a resource with its own URL, which `Location` names (set by http/location.ts or the handler). */
export const createdResponse = <T extends z.ZodType>(schema: T, description: string, location?: string) => ({
  description,
  headers: locationHeader(location),
  content: { "application/json": { schema } },
});

export const bearer = [{ Bearer: [] }];
