import { createRoute, OpenAPIHono, z } from "@hono/zod-openapi";
import { requireServer, serverPrincipal } from "../auth/principal";
import { bearer, commonErrors, ErrorSchema, jsonResponse } from "../http/openapi";
import type { AppEnv } from "../http/types";
import { validationHook } from "../http/validation";
import { imageParam } from "./schemas";
import { blobForHost } from "./blob";

const binary = { "application/octet-stream": { schema: z.string().openapi({ format: "binary" }) } };
const etag = z.object({
  ETag: z.string().openapi({ description: "The image's digest, quoted", example: '"sha256:…"' }),
});
const sized = etag.extend({
  "Content-Length": z.string(),
  "Accept-Ranges": z.string().openapi({ example: "bytes" }),
});

/** Hosts' download of a catalog image's bytes; mounted at /v1/agent. */
export const imageBlobRoutes = new OpenAPIHono<AppEnv>({ defaultHook: validationHook }).openapi(
  createRoute({
    method: "get",
    path: "/images/{id}/blob",
    operationId: "getAgentImageBlob",
    tags: ["host agents"],
    summary:
      "A stored image's bytes, for a server whose desired config names it (its own server token); whole or one Range",
    security: bearer,
    middleware: [requireServer] as const,
    request: {
      params: imageParam,
      headers: z.object({
        range: z
          .string()
          .max(200)
          .optional()
          .openapi({ description: "One `bytes=` range", example: "bytes=0-1048575" }),
        // Any length: a list naming no current tag simply does not match (RFC 9110 §13.1.2), never a 400.
        "if-none-match": z
          .string()
          .optional()
          .openapi({ description: "Entity tags (weak comparison, a list, or *): 304 when one is the digest, quoted" }),
      }),
    },
    responses: {
      200: { description: "The whole image", headers: sized, content: binary },
      206: {
        description: "The range asked for",
        headers: sized.extend({ "Content-Range": z.string() }),
        content: binary,
      },
      304: { description: "Unchanged: the If-None-Match tag is the image's digest", headers: etag },
      ...commonErrors,
      404: jsonResponse(ErrorSchema, "No such image in this server's desired config (`not_found`)"),
      416: jsonResponse(ErrorSchema, "The Range is outside the image (`range_not_satisfiable`)"),
    },
  }),
  async (c) => {
    const host = serverPrincipal(c.var.principal);
    const h = c.req.valid("header");
    const blob = await blobForHost(c.env, host, c.req.valid("param").id, {
      range: h.range,
      ifNoneMatch: h["if-none-match"],
    });
    if (blob.kind === "not_modified") return c.body(null, 304, { ETag: blob.etag });
    const headers: Record<string, string> = {
      ETag: blob.etag,
      "Content-Type": "application/octet-stream",
      "Accept-Ranges": "bytes",
      "Content-Length": String(blob.range ? blob.range.length : blob.size),
    };
    if (!blob.range) return c.body(blob.body, 200, headers);
    const { offset, length } = blob.range;
    return c.body(blob.body, 206, {
      ...headers,
      "Content-Range": `bytes ${offset}-${offset + length - 1}/${blob.size}`,
    });
  },
);
