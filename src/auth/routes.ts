import { createRoute, OpenAPIHono, z } from "@hono/zod-openapi";
import { and, asc, eq, gt, isNull } from "drizzle-orm";
import { auditInsert } from "../audit/log";
import { getDb } from "../db/client";
import { OPERATOR_SCOPES, TOKEN_KINDS, TOKEN_SCOPES } from "../domain/enums";
import { tokens } from "../db/schema";
import { notFound } from "../http/errors";
import { locationOfCreated } from "../http/location";
import { bearer, createdResponse, commonErrors, jsonBody, jsonResponse, notFoundError } from "../http/openapi";
import { cursorParam, decodeCursor, limitParam, page } from "../http/paging";
import type { AppEnv } from "../http/types";
import { validationHook } from "../http/validation";
import { revokeToken } from "./service";
import { iso, isoOrNull } from "../lib/time";
import { actorOf, requireScope } from "./principal";
import { issueToken } from "./tokens";


const TokenInput = z
  .strictObject({ name: z.string().min(1).max(200), scope: z.enum(OPERATOR_SCOPES) })
  .openapi("TokenInput");

const Token = z
  .object({
    id: z.string(),
    kind: z.enum(TOKEN_KINDS),
    scope: z.enum(TOKEN_SCOPES),
    server_id: z.string().nullable(),
    name: z.string(),
    created_by: z.string(),
    created_at: z.string(),
    revoked_at: z.string().nullable(),
  })
  .openapi("Token");

const view = (r: typeof tokens.$inferSelect) => ({
  id: r.id,
  kind: r.kind,
  scope: r.scope,
  server_id: r.serverId,
  name: r.name,
  created_by: r.createdBy,
  created_at: iso(r.createdAt),
  revoked_at: isoOrNull(r.revokedAt),
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
    const input = c.req.valid("json");
    const db = getDb(c.env.DB);
    const id = crypto.randomUUID();
    const { token, hash } = await issueToken("operator", id);
    const row = {
      id,
      kind: "operator" as const,
      scope: input.scope,
      serverId: null,
      name: input.name,
      hash,
      createdBy: actorOf(c.var.principal),
      createdAt: Date.now(),
      revokedAt: null,
    };
    await db.batch([
      db.insert(tokens).values(row),
      auditInsert(db, { actor: row.createdBy, action: "token.create", target: `token:${id}`, details: input }),
    ]);
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
    const rows = await getDb(c.env.DB)
      .select()
      .from(tokens)
      .where(and(q.kind ? eq(tokens.kind, q.kind) : undefined, after ? gt(tokens.id, after[0]) : undefined))
      .orderBy(asc(tokens.id))
      .limit(q.limit + 1);
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
    return c.json(view(await revokeToken(c.env, actorOf(c.var.principal), id)), 200);
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
    const row = await getDb(c.env.DB).query.tokens.findFirst({ where: eq(tokens.id, id) });
    if (!row) throw notFound("token", id);
    return c.json(view(row), 200);
  },
);
