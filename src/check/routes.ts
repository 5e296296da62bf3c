import { createRoute, OpenAPIHono, z } from "@hono/zod-openapi";
import { requireScope } from "../auth/principal";
import { fleetId } from "../model/fleet";
import { bearer, commonErrors, serverNameErrors, jsonBody, jsonResponse } from "../http/openapi";
import { cursorParam, decodeCursor, limitParam, page } from "../http/paging";
import type { AppEnv } from "../http/types";
import { validationHook } from "../http/validation";
import { agentName } from "../model/server/schemas";
import { serverRef } from "../servers/schemas";
import { checkServers, fixServerAgents } from "./service";
import { CheckAnswer, FixAnswer, FixInput } from "./schemas";

// One chain, so the type of this router (and of the app that mounts it) carries every route for hc.
export const checkRoutes = new OpenAPIHono<AppEnv>({ defaultHook: validationHook })
  .openapi(
    createRoute({
      method: "get",
      path: "/server-agents",
      operationId: "checkServerAgents",
      tags: ["check"],
      summary:
        "Drift between desired and reported agents, one finding per problem with its fix; skipped servers with why",
      description:
        "Answers from the fleet-wide index. Paged by server: a page holds every finding of up to `limit` servers " +
        "that are not realized; pass `next_cursor` back as `cursor` for the next page.",
      security: bearer,
      middleware: [requireScope("read")] as const,
      request: {
        query: z.object({
          fleet: fleetId.optional(),
          server: serverRef.optional(),
          agent: agentName.optional(),
          limit: limitParam,
          cursor: cursorParam,
        }),
      },
      responses: {
        200: jsonResponse(CheckAnswer, "A page of findings"),
        ...commonErrors,
        ...serverNameErrors,
      },
    }),
    async (c) => {
      const q = c.req.valid("query");
      const after = decodeCursor(q.cursor, 1);
      const out = await checkServers(c.env, c.var.principal, q, after?.[0] ?? null, q.limit);
      const { next_cursor } = page(out.rows, q.limit, (r) => [r.id]);
      return c.json({ findings: out.findings, skipped: out.skipped, next_cursor }, 200);
    },
  )
  .openapi(
    createRoute({
      method: "post",
      path: "/server-agents/fix",
      operationId: "fixServerAgents",
      tags: ["check"],
      summary:
        "Fix drift: per server, re-plan and re-issue, ask for a refresh, or nothing for a host that does not answer",
      description:
        "Takes the filters of the check and works on one page of it (paged by server, like the check). " +
        "`dry_run` (default true) says what it would do and changes nothing; `dry_run: false` does it, audited: " +
        "a `check.fix` row written before anything else (if the audit log refuses it, 503 `unavailable` and nothing " +
        "was fixed), then a `check.fix.result` row with each server's outcome.",
      security: bearer,
      middleware: [requireScope("write")] as const,
      request: { body: jsonBody(FixInput) },
      responses: {
        200: jsonResponse(FixAnswer, "What was (or would be) done, per server"),
        ...commonErrors,
        ...serverNameErrors,
      },
    }),
    async (c) => {
      const q = c.req.valid("json");
      const after = decodeCursor(q.cursor, 1);
      const out = await fixServerAgents(c.env, c.var.principal, {
        filter: { fleet: q.fleet, server: q.server, agent: q.agent },
        dryRun: q.dry_run,
        after: after?.[0] ?? null,
        limit: q.limit,
      });
      const { next_cursor } = page(out.rows, q.limit, (r) => [r.id]);
      return c.json({ dry_run: q.dry_run, actions: out.actions, skipped: out.skipped, next_cursor }, 200);
    },
  );
