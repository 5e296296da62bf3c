import { z } from "@hono/zod-openapi";
import { UPGRADE_RUN_STATES, UPGRADE_STATUSES, UPGRADE_STEP_STATES } from "../domain/enums";

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

export const UpgradeStatus = z
  .object({
    state: z.enum(UPGRADE_STATUSES).openapi({
      description:
        "current: nothing to do; running: a runner holds the lease; failing: the last run failed; pending: waiting for a run",
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

export const RunResult = z
  .object({
    outcome: z.enum(["up_to_date", "applied"]),
    data_version: z.number().int(),
    newest_version: z.number().int(),
    run_id: z.number().int().nullable(),
    applied: z.array(z.number().int()),
  })
  .openapi("UpgradeRunResult");
