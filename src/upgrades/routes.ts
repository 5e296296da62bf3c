import { createRoute, OpenAPIHono, z } from "@hono/zod-openapi";
import { actorOf, requireScope } from "../auth/principal";
import { auditInsert } from "../audit/log";
import { getDb } from "../db/client";
import { UPGRADE_RUN_STATES, UPGRADE_STATUSES, UPGRADE_STEP_STATES } from "../domain/enums";
import { ApiError } from "../http/errors";
import { bearer, commonErrors, conflictError, jsonResponse } from "../http/openapi";
import { cursorParam, decodeIdCursor, limitParam, page } from "../http/paging";
import type { AppEnv } from "../http/types";
import { validationHook } from "../http/validation";
import { iso, isoOrNull } from "../lib/time";
import { LEASE_TIMEOUT_MS } from "./lease";
import { runUpgrades } from "./runner";
import { currentHolder, latestRun, listAttempts, readUpgradeState, type RunRow } from "./state";
import { UPGRADE_STEPS, NEWEST_VERSION } from "./steps";


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
    lease: Lease.nullable(),
    last_run: Run.nullable(),
    history: z.object({ items: z.array(Attempt), next_cursor: z.string().nullable() }),
  })
  .openapi("UpgradeStatus");

const runView = (r: RunRow) => ({
  id: r.id,
  runner: r.runner,
  state: r.state,
  from_version: r.fromVersion,
  to_version: r.toVersion,
  took_over_from: r.tookOverFrom,
  started_at: iso(r.startedAt),
  heartbeat_at: iso(r.heartbeatAt),
  finished_at: isoOrNull(r.finishedAt),
  error: r.error,
});

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
    tags: ["upgrades"],
    summary: "Data version, pending steps, the lease holder and the step history (newest first)",
    security: bearer,
    middleware: [requireScope("read")] as const,
    request: { query: z.object({ limit: limitParam, cursor: cursorParam }) },
    responses: { 200: jsonResponse(UpgradeStatus, "Where the data upgrade stands"), ...commonErrors },
  }),
  async (c) => {
    const { limit, cursor } = c.req.valid("query");
    const before = decodeIdCursor(cursor);
    const db = getDb(c.env.DB);
    const [state, holder, last, rows] = await Promise.all([
      readUpgradeState(db),
      currentHolder(db),
      latestRun(db),
      listAttempts(db, before, limit),
    ]);
    const history = page(rows, limit, (r) => [String(r.id)]);
    const now = Date.now();
    const current = state.version >= NEWEST_VERSION;
    return c.json(
      {
        state: current ? "current" : holder ? "running" : last?.state === "failed" ? "failing" : "pending",
        data_version: state.version,
        newest_version: NEWEST_VERSION,
        pending: UPGRADE_STEPS.filter((s) => s.version > state.version).map((s) => ({
          version: s.version,
          description: s.description,
        })),
        lease: holder ? { ...runView(holder), stale: holder.heartbeatAt < now - LEASE_TIMEOUT_MS } : null,
        last_run: last ? runView(last) : null,
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
    const actor = actorOf(c.var.principal);
    const result = await runUpgrades(c.env, { trigger: "operator", by: `operator(${actor})` });
    if (result.outcome !== "up_to_date") {
      await auditInsert(getDb(c.env.DB), {
        actor,
        action: "upgrade.run",
        target: "upgrades",
        details: { outcome: result.outcome, data_version: result.version },
      });
    }
    const versions = { data_version: result.version, newest_version: result.newest };
    switch (result.outcome) {
      case "up_to_date":
        return c.json({ outcome: result.outcome, ...versions, run_id: null, applied: [] }, 200);
      case "applied":
        return c.json({ outcome: result.outcome, ...versions, run_id: result.run_id, applied: result.applied }, 200);
      case "lease_held":
        throw new ApiError(409, "upgrade_lease_held", `runner ${result.holder.runner} is applying the steps now`, {
          ...versions,
          lease: runView(result.holder),
        });
      case "lease_lost":
        throw new ApiError(409, "upgrade_lease_held", "another runner took the lease over during this run", {
          ...versions,
          run_id: result.run_id,
        });
      case "failed":
        throw new ApiError(
          503,
          "upgrade_failed",
          `upgrade step ${result.failed_step} failed: ${result.error}`,
          { ...versions, run_id: result.run_id, applied: result.applied, failed_step: result.failed_step, error: result.error },
          { "Retry-After": "60" },
        );
      case "backing_off":
        // Only request-triggered runs back off; an operator's never does.
        throw new Error("unreachable: operator runs do not back off");
    }
  },
);
