/**
 * A rollout's strategy as operators write it (POST /v1/rollouts `strategy`, `hm rollout start
 * --strategy FILE`, a fleet spec's default per agent): an ordered list of steps. What needs the
 * fleet to judge (a label key nobody has, a wave that releases nobody, an endpoint that does not
 * answer) is checked when a rollout is created (src/rollouts/strategy-check.ts). In the model, not
 * in src/rollouts/, because the fleet spec (src/specs/) declares it too and sits beside the
 * rollouts, not above them.
 */
import { z } from "@hono/zod-openapi";
import { outboundUrlProblem } from "../lib/url";
import { labelKey, labelsSchema } from "./server/labels";
import { MaintenanceWindowSchema } from "./windows";

/** Steps a strategy may hold; the plan they expand to is bounded too (MAX_PHASES in ./strategy.ts). */
const MAX_STRATEGY_STEPS = 50;
const MAX_URL = 2048;
const MAX_QUERY = 2000;

const count = z.number().int().min(1).max(1_000_000);
const percent = z.number().gt(0).max(100);

/** An http(s) URL; whether Harbormaster may call it (https, loopback http in local runs) is the service's check. */
const outboundUrl = z
  .string()
  .max(MAX_URL)
  .regex(new RegExp("^https?://"), "must start with https://")
  .openapi({ format: "uri" });

const oneOf = (keys: string[]) => (v: Record<string, unknown>, ctx: z.RefinementCtx) => {
  const given = keys.filter((k) => v[k] !== undefined);
  if (given.length !== 1)
    ctx.addIssue({
      code: "custom",
      message: `give exactly one of ${keys.join(", ")}${given.length ? ` (got ${given.join(" and ")})` : ""}`,
      path: [given[1] ?? keys[0]],
    });
};

const CanaryStep = z
  .strictObject({
    type: z.literal("canary"),
    count: count.optional().openapi({ description: "this many targets" }),
    percent: percent.optional().openapi({ description: "this share of the targets (rounded up, at least 1)" }),
    labels: labelsSchema.optional().openapi({ description: "chosen among the targets with every one of these labels" }),
  })
  .superRefine(oneOf(["count", "percent"]))
  .openapi("CanaryStep");

const PauseStep = z
  .strictObject({
    type: z.literal("pause"),
    duration_s: z
      .number()
      .int()
      .min(1)
      .max(7 * 86_400)
      .optional()
      .openapi({ description: "a bake time; without it the rollout pauses until resumed" }),
  })
  .openapi("PauseStep");

const COMPARISONS = ["<", "<=", ">", ">=", "==", "!="] as const;
export type Comparison = (typeof COMPARISONS)[number];

const timeout = z.number().int().min(1).max(10).default(5).openapi({ description: "how long one check may take" });

const AnalysisCheck = z
  .discriminatedUnion("kind", [
    z.strictObject({
      kind: z.literal("realized"),
      min_percent: z.number().min(0).max(100).default(100).openapi({
        description: "share of the servers released so far that must have realized the image and be healthy",
      }),
    }),
    z.strictObject({
      kind: z.literal("failure_percent"),
      max_percent: z
        .number()
        .min(0)
        .max(100)
        .openapi({ description: "the fleet's failed and stale servers, as a share of its servers, at most this" }),
    }),
    z.strictObject({
      kind: z.literal("prometheus"),
      endpoint: outboundUrl.openapi({ description: "a Prometheus-compatible base URL; /api/v1/query is appended" }),
      query: z.string().trim().min(1).max(MAX_QUERY),
      comparison: z.enum(COMPARISONS),
      threshold: z.number(),
      timeout_s: timeout,
    }),
    z.strictObject({
      kind: z.literal("https"),
      url: outboundUrl.openapi({
        description: "answers 2xx while the check holds (as a reboot gate's external check)",
      }),
      timeout_s: timeout,
    }),
  ])
  .openapi("AnalysisCheck");
export type AnalysisCheck = z.infer<typeof AnalysisCheck>;

const AnalysisStep = z
  .strictObject({
    type: z.literal("analysis"),
    bake_s: z.number().int().min(0).max(86_400).default(60).openapi({ description: "the checks must hold this long" }),
    interval_s: z.number().int().min(1).max(3600).default(30).openapi({ description: "how often they are sampled" }),
    failure_limit: z
      .number()
      .int()
      .min(0)
      .max(100)
      .default(0)
      .openapi({ description: "failed samples a check may have before the analysis fails" }),
    checks: z.array(AnalysisCheck).min(1).max(10),
  })
  .openapi("AnalysisStep");

const WaveStep = z
  .strictObject({
    type: z.literal("wave"),
    count: count.optional().openapi({ description: "this many more targets" }),
    percent: percent
      .optional()
      .openapi({ description: "released up to this share of the targets (cumulative: 10, 50, 100)" }),
    ramp: z
      .strictObject({ start: count, factor: z.number().gt(1).max(10) })
      .optional()
      .openapi({ description: "waves of start, start×factor, … targets until every target is released" }),
    by: labelKey.optional().openapi({ description: "one value of this label key at a time (e.g. zone)" }),
  })
  .superRefine(oneOf(["count", "percent", "ramp"]))
  .openapi("WaveStep");

export const StrategyStep = z.discriminatedUnion("type", [CanaryStep, PauseStep, AnalysisStep, WaveStep]);
export type StrategyStep = z.infer<typeof StrategyStep>;

export const StrategyInput = z
  .strictObject({
    steps: z.array(StrategyStep).min(1).max(MAX_STRATEGY_STEPS),
    auto_rollback: z
      .boolean()
      .default(false)
      .openapi({ description: "a failed analysis rolls back the servers the rollout changed" }),
    windows: z.array(MaintenanceWindowSchema).max(16).optional().openapi({
      description: "targets start only inside one of these weekly windows (a rollback does not wait for them)",
    }),
  })
  .superRefine((s, ctx) => {
    // Shares are cumulative: each must grow, and nothing follows 100 %.
    let reached = 0;
    let full: number | null = null;
    s.steps.forEach((step, i) => {
      if (full !== null) {
        ctx.addIssue({
          code: "custom",
          path: ["steps", i],
          message: `step ${i} comes after step ${full}, which already releases every target (100 %)`,
        });
        return;
      }
      if (step.type === "wave" && step.percent !== undefined) {
        if (step.percent <= reached)
          ctx.addIssue({
            code: "custom",
            path: ["steps", i, "percent"],
            message: `a wave's percent is cumulative: ${step.percent} % does not grow past the ${reached} % released before it`,
          });
        reached = Math.max(reached, step.percent);
      }
      if ((step.type === "wave" || step.type === "canary") && step.percent === 100) full = i;
      if (step.type === "wave" && step.ramp) full = i;
    });
  })
  .openapi("RolloutStrategy");
export type StrategyInput = z.infer<typeof StrategyInput>;

const isObject = (v: unknown): v is Record<string, unknown> => typeof v === "object" && v !== null && !Array.isArray(v);

/**
 * The analysis checks' URLs Harbormaster may not call (HTTPS, or http to loopback in local runs),
 * each by its place below the strategy (`steps.2.checks.0.endpoint`). The one walk for a strategy
 * sent with a rollout and for a fleet spec's defaults; it takes what was sent as it is, so a spec
 * whose schema failed elsewhere still lists them. A URL the schema refuses (not http(s) at all) is
 * the schema's problem, not listed twice.
 */
export function strategyUrlProblems(
  strategy: unknown,
  allowLoopbackHttp: boolean,
): { path: string; field: "endpoint" | "url"; problem: string }[] {
  const steps = isObject(strategy) && Array.isArray(strategy.steps) ? strategy.steps : [];
  return steps.flatMap((step: unknown, i) => {
    const checks = isObject(step) && Array.isArray(step.checks) ? step.checks : [];
    return checks.flatMap((check: unknown, j) => {
      if (!isObject(check)) return [];
      const field = check.kind === "prometheus" ? "endpoint" : check.kind === "https" ? "url" : null;
      const url = field ? check[field] : undefined;
      if (!field || typeof url !== "string" || !/^https?:\/\//.test(url)) return [];
      const problem = outboundUrlProblem(url, allowLoopbackHttp);
      return problem ? [{ path: `steps.${i}.checks.${j}.${field}`, field, problem }] : [];
    });
  });
}
