import { createRoute, OpenAPIHono, z } from "@hono/zod-openapi";
import { TOKEN_KINDS } from "../domain/enums";
import { locationOfCreated } from "../http/location";
import { bearer, createdResponse, commonErrors, jsonBody, jsonResponse, notFoundError } from "../http/openapi";
import { cursorParam, decodeCursor, limitParam, page } from "../http/paging";
import type { AppEnv } from "../http/types";
import { validationHook } from "../http/validation";
import { createOperatorToken, revokeToken, searchTokens, tokenOf } from "./service";
import type { TokenRow } from "./store";
import { iso, isoOrNull } from "../lib/time";
import { operatorOf, requireScope } from "./principal";
import { Token, TokenInput } from "./schemas";

const view = (r: TokenRow): z.input<typeof Token> => ({
  id: r.id,
  kind: r.kind,
  scope: r.scope,
  server_id: r.serverId,
  name: r.name,
  fleets: r.fleets,
  description: r.description,
  created_by: r.createdBy,
  created_at: iso(r.createdAt),
  expires_at: isoOrNull(r.expiresAt),
  revoked_at: isoOrNull(r.revokedAt),
  state: r.revokedAt !== null ? "revoked" : r.expiresAt !== null && r.expiresAt <= Date.now() ? "expired" : "active",
});

// One chain, so the type of tokenRoutes (and of the app that mounts it at /v1/tokens) carries every route for hc.
export const tokenRoutes = new OpenAPIHono<AppEnv>({ defaultHook: validationHook })
  .openapi(
    createRoute({
      method: "post",
      path: "/",
      operationId: "createToken",
      tags: ["tokens"],
      summary: "Create an operator token; the secret is returned once",
      security: bearer,
      middleware: [requireScope("admin"), locationOfCreated] as const,
      request: { body: jsonBody(TokenInput) },
      responses: {
        201: createdResponse(Token.extend({ token: z.string() }), "The token, with its secret"),
        ...commonErrors,
      },
    }),
    async (c) => {
      const { row, token } = await createOperatorToken(c.env, operatorOf(c.var.principal), c.req.valid("json"));
      return c.json({ ...view(row), token }, 201);
    },
  )

  .openapi(
    createRoute({
      method: "get",
      path: "/",
      operationId: "listTokens",
      tags: ["tokens"],
      summary: "List tokens (never their secrets)",
      security: bearer,
      middleware: [requireScope("admin")] as const,
      request: {
        query: z.object({
          kind: z.enum(TOKEN_KINDS).optional(),
          limit: limitParam,
          cursor: cursorParam,
        }),
      },
      responses: {
        200: jsonResponse(z.object({ items: z.array(Token), next_cursor: z.string().nullable() }), "A page"),
        ...commonErrors,
      },
    }),
    async (c) => {
      const q = c.req.valid("query");
      const after = decodeCursor(q.cursor, 1);
      const rows = await searchTokens(c.env, c.var.principal, q.kind, after?.[0] ?? null, q.limit);
      const { items, next_cursor } = page(rows, q.limit, (r) => [r.id]);
      return c.json({ items: items.map(view), next_cursor }, 200);
    },
  )

  .openapi(
    createRoute({
      method: "delete",
      path: "/{id}",
      operationId: "revokeToken",
      tags: ["tokens"],
      summary: "Revoke a token; it stops working at once",
      security: bearer,
      middleware: [requireScope("admin")] as const,
      request: { params: z.object({ id: z.uuid() }) },
      responses: { 200: jsonResponse(Token, "The revoked token"), ...commonErrors, ...notFoundError },
    }),
    async (c) => {
      const { id } = c.req.valid("param");
      return c.json(view(await revokeToken(c.env, c.var.principal, id)), 200);
    },
  )

  .openapi(
    createRoute({
      method: "get",
      path: "/{id}",
      operationId: "getToken",
      tags: ["tokens"],
      summary: "One token (never its secret)",
      security: bearer,
      middleware: [requireScope("admin")] as const,
      request: { params: z.object({ id: z.uuid() }) },
      responses: { 200: jsonResponse(Token, "The token"), ...commonErrors, ...notFoundError },
    }),
    async (c) => {
      const { id } = c.req.valid("param");
      return c.json(view(await tokenOf(c.env, c.var.principal, id)), 200);
    },
  );
