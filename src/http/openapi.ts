import { z } from "@hono/zod-openapi";

export const ErrorSchema = z
  .object({
    error: z.object({
      code: z.string().openapi({ example: "validation_failed" }),
      message: z.string(),
      details: z.unknown().optional(),
    }),
  })
  .openapi("Error");

const errorResponse = (description: string) => ({
  description,
  content: { "application/json": { schema: ErrorSchema } },
});

/** The error answers every authenticated route can give; listed once for the document. */
export const commonErrors = {
  400: errorResponse("The request is malformed or fails validation; nothing changed"),
  401: errorResponse("Missing or invalid bearer token"),
  403: errorResponse("The token's scope or owner does not allow this"),
  503: errorResponse("Data upgrade in progress; retry after the Retry-After delay"),
} as const;

export const notFoundError = { 404: errorResponse("No such resource") } as const;
export const conflictError = (what: string) => ({ 409: errorResponse(what) }) as const;

export const jsonBody = <T extends z.ZodType>(schema: T) => ({
  required: true,
  content: { "application/json": { schema } },
});

export const jsonResponse = <T extends z.ZodType>(schema: T, description: string) => ({
  description,
  content: { "application/json": { schema } },
});

/** A 201 for a resource with its own URL, which `Location` names (set by http/location.ts). */
export const createdResponse = <T extends z.ZodType>(schema: T, description: string) => ({
  description,
  headers: z.object({ Location: z.string().openapi({ description: "The created resource's URL", example: "/v1/fleets/prod" }) }),
  content: { "application/json": { schema } },
});

export const bearer = [{ Bearer: [] }];
