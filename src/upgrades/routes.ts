import { createRoute, OpenAPIHono, z } from "@hono/zod-openapi";
import { requireScope } from "../auth/principal";
import { UPGRADE_RUN_STATES, UPGRADE_STATUSES, UPGRADE_STEP_STATES } from "../domain/enums";
import { actorOf } from "../domain/principal";
import { bearer, commonErrors, conflictError, jsonResponse } from "../http/openapi";
import { cursorParam, decodeIdCursor, limitParam, page } from "../http/paging";
import type { AppEnv } from "../http/types";
import { validationHook } from "../http/validation";
import { iso, isoOrNull } from "../lib/time";
import { runUpgradesNow, upgradeStatus } from "./service";

const Run = z
  .object({
    id: z.number().int(),
    runner: z.string(),
    state: z.enum(UPGRADE_RUN_STATES),
    from_version: z.number().int(),
    to_version: z.number().int().nullable(),
    took_over_from: z.number().int().nullable(),
    started_at: z.string(),
    heartbeat_at: z.string(),
    finished_at: z.string().nullable(),
    error: z.string().nullable(),
  })
  .openapi("UpgradeRun");

const Lease = Run.extend({
  stale: z.boolean().openapi({ description: "No heartbeat within the lease timeout: the next run takes it over" }),
}).openapi("UpgradeLease");

const Attempt = z
  .object({
    id: z.number().int(),
    run_id: z.number().int(),
    version: z.number().int(),
    description: z.string(),
    runner: z.string(),
    state: z.enum(UPGRADE_STEP_STATES),
    chunks: z.number().int(),
    started_at: z.string(),
    finished_at: z.string().nullable(),
    error: z.string().nullable(),
  })
  .openapi("UpgradeStepAttempt");

const UpgradeStatus = z
  .object({
    state: z.enum(UPGRADE_STATUSES).openapi({
      description: "current: nothing to do; running: a runner holds the lease; failing: the last run failed; pending: waiting for a run",
    }),
    data_version: z.number().int(),
    newest_version: z.number().int(),
    pending: z.array(z.object({ version: z.number().int(), description: z.string() })),
    // A union with null, not .nullable(): the document generator drops nullability from a $ref.
    lease: z.union([Lease, z.null()]),
    last_run: z.union([Run, z.null()]),
    history: z.object({ items: z.array(Attempt), next_cursor: z.string().nullable() }),
  })
  .openapi("UpgradeStatus");

const RunResult = z
  .object({
    outcome: z.enum(["up_to_date", "applied"]),
    data_version: z.number().int(),
    newest_version: z.number().int(),
    run_id: z.number().int().nullable(),
    applied: z.array(z.number().int()),
  })
  .openapi("UpgradeRunResult");

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
    middleware: [requireScope("admin")] as const,
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
