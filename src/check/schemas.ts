import { z } from "@hono/zod-openapi";
import { ERROR_CODES } from "../domain/errors";
import { DEFAULT_PAGE_SIZE, MAX_CURSOR_LENGTH, MAX_PAGE_SIZE } from "../domain/limits";
import { fleetId } from "../model/fleet";
import { agentName } from "../model/server/schemas";
import { serverRef } from "../servers/schemas";
import { BlockedByListSchema } from "../model/blocked-by";
import { driftFix, driftReason, Finding, Skipped } from "./drift";

export const FixInput = z
  .strictObject({
    fleet: fleetId.optional(),
    server: serverRef.optional(),
    agent: agentName.optional(),
    dry_run: z.boolean().default(true),
    limit: z.number().int().min(1).max(MAX_PAGE_SIZE).default(DEFAULT_PAGE_SIZE),
    cursor: z.string().max(MAX_CURSOR_LENGTH).optional(),
  })
  .openapi("DriftFixInput");

/** One of the API's error codes (src/domain/errors.ts), as a per-server result names it. */
const ErrorCode = z.enum(ERROR_CODES).openapi("ErrorCode");

const FixActionSchema = z
  .object({
    server: z.string(),
    hostname: z.string(),
    fleet: z.string().openapi({ description: "The server's fleet" }),
    action: driftFix,
    reasons: z.array(driftReason),
    result: z
      .union([
        z.object({ ok: z.literal(true), outcome: z.string(), generation: z.number().int() }),
        z
          .object({
            ok: z.literal(false),
            error: ErrorCode,
            message: z.string(),
            blocked_by: BlockedByListSchema.optional().openapi({
              description: "error budget_exhausted: the servers that hold the fleet's disruption budget",
            }),
          })
          .openapi({
            description:
              "Not fixed, and why: `budget_exhausted` (the fleet's disruption budget is spent: fix again later), " +
              "`unavailable` (the fleet's coordinator or the server's ledger did not answer; the message says " +
              "whether the write may have happened), or the ledger's refusal (`reservation_expired`, " +
              "`server_removed`, `not_found`, `unknown_fleet`, …)",
          }),
      ])
      .nullable()
      .openapi({ description: "null in a dry run, or for action none" }),
  })
  .openapi("DriftFixAction");

/** GET /v1/check/server-agents: a page of findings, and the servers the check could not judge. */
export const CheckAnswer = z.object({
  findings: z.array(Finding),
  skipped: z.array(Skipped),
  next_cursor: z.string().nullable(),
});

/** POST /v1/check/server-agents/fix: what was (or would be) done, per server. */
export const FixAnswer = z.object({
  dry_run: z.boolean(),
  actions: z.array(FixActionSchema),
  skipped: z.array(Skipped),
  next_cursor: z.string().nullable(),
});
