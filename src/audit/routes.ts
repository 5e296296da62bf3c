import { createRoute, OpenAPIHono, z } from "@hono/zod-openapi";
import { requireScope } from "../auth/principal";
import { bearer, commonErrors, serverNameErrors, jsonResponse } from "../http/openapi";
import { cursorParam, decodeIdCursor, limitParam, page } from "../http/paging";
import type { AppEnv } from "../http/types";
import { validationHook } from "../http/validation";
import { iso } from "../lib/time";
import { searchAudit } from "./service";
import { AuditEntry } from "./schemas";

// One chain, so the type of auditRoutes (and of the app that mounts it at /v1/audit) carries every route for hc.
export const auditRoutes = new OpenAPIHono<AppEnv>({ defaultHook: validationHook }).openapi(
  createRoute({
    method: "get",
    path: "/",
    operationId: "listAudit",
    tags: ["audit"],
    summary: "The audit log, newest first",
    security: bearer,
    middleware: [requireScope("read")] as const,
    request: {
      query: z.object({
        target: z.string().max(330).optional().openapi({
          description:
            "e.g. `fleet:prod`, `rollout:<id>`, `server:<id>`, `server:<hostname>` or `server:<fleet>/<hostname>`",
        }),
        limit: limitParam,
        cursor: cursorParam,
      }),
    },
    responses: {
      200: jsonResponse(z.object({ items: z.array(AuditEntry), next_cursor: z.string().nullable() }), "A page"),
      ...commonErrors,
      ...serverNameErrors,
    },
  }),
  async (c) => {
    const q = c.req.valid("query");
    const before = decodeIdCursor(q.cursor) ?? undefined;
    const rows = await searchAudit(c.env, c.var.principal, { target: q.target, before, limit: q.limit });
    const { items, next_cursor } = page(rows, q.limit, (r) => [String(r.id)]);
    return c.json(
      {
        items: items.map((r) => ({
          id: r.id,
          at: iso(r.at),
          actor: r.actor,
          actor_name: r.actor_name,
          action: r.action,
          target: r.target,
          hostname: r.hostname,
          details: r.details,
        })),
        next_cursor,
      },
      200,
    );
  },
);
