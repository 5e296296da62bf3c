import { createRoute, OpenAPIHono, z } from "@hono/zod-openapi";
import { requireScope } from "../auth/principal";
import { getDb } from "../db/client";
import { fleetId } from "../fleet/schemas";
import { bearer, commonErrors, jsonResponse } from "../http/openapi";
import { cursorParam, decodeCursor, limitParam, page } from "../http/paging";
import type { AppEnv } from "../http/types";
import { validationHook } from "../http/validation";
import { agentName } from "../ledger/schemas";
import { checkServerAgents, Finding, Skipped } from "./drift";


// One chain, so the type of this router (and of the app that mounts it) carries every route for hc.
export const checkRoutes = new OpenAPIHono<AppEnv>({ defaultHook: validationHook })
.openapi(
  createRoute({
    method: "get",
    path: "/server-agents",
    tags: ["check"],
    summary: "Drift between desired and reported agents, one finding per problem with its fix; skipped servers with why",
    description:
      "Answers from the fleet-wide index. Paged by server: a page holds every finding of up to `limit` servers " +
      "that are not realized; pass `next_cursor` back as `cursor` for the next page.",
    security: bearer,
    middleware: [requireScope("read")] as const,
    request: {
      query: z.object({
        fleet: fleetId.optional(),
        server: z.uuid().optional(),
        agent: agentName.optional(),
        limit: limitParam,
        cursor: cursorParam,
      }),
    },
    responses: {
      200: jsonResponse(
        z.object({ findings: z.array(Finding), skipped: z.array(Skipped), next_cursor: z.string().nullable() }),
        "A page of findings",
      ),
      ...commonErrors,
    },
  }),
  async (c) => {
    const q = c.req.valid("query");
    const after = decodeCursor(q.cursor, 1);
    const out = await checkServerAgents(getDb(c.env.DB), q, after?.[0] ?? null, q.limit);
    const { next_cursor } = page(out.rows, q.limit, (r) => [r.id]);
    return c.json({ findings: out.findings, skipped: out.skipped, next_cursor }, 200);
  },
);
