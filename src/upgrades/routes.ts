import { createRoute, OpenAPIHono, z } from "@hono/zod-openapi";
import { requireAllFleets, requireScope } from "../auth/principal";
import { actorOf } from "../domain/principal";
import { bearer, commonErrors, conflictError, jsonResponse } from "../http/openapi";
import { cursorParam, decodeIdCursor, limitParam, page } from "../http/paging";
import type { AppEnv } from "../http/types";
import { validationHook } from "../http/validation";
import { iso, isoOrNull } from "../lib/time";
import { runUpgradesNow, upgradeStatus } from "./service";
import { RunResult, UpgradeStatus } from "./schemas";

// One chain, so the type of upgradeRoutes (and of the app that mounts it at /v1/upgrades) carries every route for hc.
export const upgradeRoutes = new OpenAPIHono<AppEnv>({ defaultHook: validationHook })
  .openapi(
    createRoute({
      method: "get",
      path: "/",
      operationId: "getUpgrades",
      tags: ["upgrades"],
      summary: "Data version, pending steps, the lease holder and the step history (newest first)",
      security: bearer,
      middleware: [requireScope("read")] as const,
      request: { query: z.object({ limit: limitParam, cursor: cursorParam }) },
      responses: { 200: jsonResponse(UpgradeStatus, "Where the data upgrade stands"), ...commonErrors },
    }),
    async (c) => {
      const { limit, cursor } = c.req.valid("query");
      const { attempts, ...status } = await upgradeStatus(c.env, decodeIdCursor(cursor), limit);
      const history = page(attempts, limit, (r) => [String(r.id)]);
      return c.json(
        {
          ...status,
          history: {
            items: history.items.map((a) => ({
              id: a.id,
              run_id: a.runId,
              version: a.version,
              description: a.description,
              runner: a.runner,
              state: a.state,
              chunks: a.chunks,
              started_at: iso(a.startedAt),
              finished_at: isoOrNull(a.finishedAt),
              error: a.error,
            })),
            next_cursor: history.next_cursor,
          },
        } satisfies z.infer<typeof UpgradeStatus>,
        200,
      );
    },
  )

  .openapi(
    createRoute({
      method: "post",
      path: "/run",
      operationId: "runUpgrades",
      tags: ["upgrades"],
      summary: "Run pending upgrade steps now and wait for the outcome",
      description:
        "409 `upgrade_lease_held` when another runner is at work (watch GET /v1/upgrades); " +
        "503 `upgrade_failed` when a step failed (recorded in the history; the API stays drained).",
      security: bearer,
      middleware: [requireScope("admin"), requireAllFleets] as const,
      responses: {
        200: jsonResponse(RunResult, "Every step is applied (now or before)"),
        ...commonErrors,
        ...conflictError("Another runner holds the upgrade lease"),
      },
    }),
    async (c) => {
      return c.json(await runUpgradesNow(c.env, actorOf(c.var.principal)), 200);
    },
  );
