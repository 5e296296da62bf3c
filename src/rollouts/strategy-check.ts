/**
 * A strategy judged against the fleet before anything starts: every URL one Harbormaster may
 * call, every label key some server of the fleet has, a plan in which each step releases someone,
 * and every Prometheus endpoint answering its query within a few seconds. A refusal names each
 * problem's path (`strategy.steps.2.checks.0.endpoint`); nothing is claimed or created before.
 */
import { and, eq, inArray } from "drizzle-orm";
import type { Db } from "../db/client";
import { serverLabels } from "../db/schema";
import { DomainError } from "../domain/errors";
import type { Fetcher } from "../fleetlock/external-check";
import { prometheusCheck } from "./analysis-checks";
import { planStrategy, type Plan, type PlanTarget } from "./strategy";
import { strategyUrlProblems, type StrategyInput } from "../model/strategy";

/** How long creation waits for a Prometheus endpoint: a host that hangs must not hold the request. */
const CREATE_PROBE_TIMEOUT_S = 3;

type Problem = { path: string; message: string };

const refuse = (code: "validation_failed" | "invalid_strategy", problems: Problem[]) => {
  throw new DomainError(
    code,
    `strategy refused: ${problems
      .slice(0, 3)
      .map((p) => `${p.path}: ${p.message}`)
      .join("; ")}${problems.length > 3 ? ` (and ${problems.length - 3} more)` : ""}`,
    problems,
  );
};

/** The plan of a strategy over the fleet's targets, or a refusal naming every problem's path. */
export async function checkStrategy(
  db: Db,
  fetcher: Fetcher,
  opts: { fleet: string; allowLoopbackHttp: boolean },
  strategy: StrategyInput,
  targets: PlanTarget[],
): Promise<{ plan: Plan; phaseOf: Map<string, number> }> {
  const urls = strategyUrlProblems(strategy, opts.allowLoopbackHttp).map((p) => ({
    path: `strategy.${p.path}`,
    message: p.problem,
  }));
  if (urls.length) refuse("validation_failed", urls);

  // Label keys: a key no server of the fleet has is a typo, not an empty wave.
  const keys = new Map<string, string>();
  strategy.steps.forEach((s, i) => {
    if (s.type === "canary" && s.labels)
      for (const k of Object.keys(s.labels)) if (!keys.has(k)) keys.set(k, `strategy.steps.${i}.labels.${k}`);
    if (s.type === "wave" && s.by && !keys.has(s.by)) keys.set(s.by, `strategy.steps.${i}.by`);
  });
  if (keys.size) {
    const rows = await db
      .selectDistinct({ key: serverLabels.key })
      .from(serverLabels)
      .where(and(eq(serverLabels.fleetId, opts.fleet), inArray(serverLabels.key, [...keys.keys()])));
    const known = new Set(rows.map((r) => r.key));
    const unknown = [...keys].filter(([k]) => !known.has(k));
    if (unknown.length)
      refuse(
        "invalid_strategy",
        unknown.map(([k, path]) => ({ path, message: `no server of fleet '${opts.fleet}' has the label key '${k}'` })),
      );
  }

  const planned = planStrategy(strategy, targets);
  if (!planned.ok) refuse("invalid_strategy", planned.problems);

  // Each Prometheus query once, all at once, each bounded: creation takes at most a few seconds.
  const probes: { path: string; check: Parameters<typeof prometheusCheck>[1] }[] = [];
  strategy.steps.forEach((s, i) => {
    if (s.type === "analysis")
      s.checks.forEach((c, j) => {
        if (c.kind === "prometheus")
          probes.push({
            path: `strategy.steps.${i}.checks.${j}.endpoint`,
            check: { ...c, timeout_s: Math.min(c.timeout_s, CREATE_PROBE_TIMEOUT_S) },
          });
      });
  });
  const answers = await Promise.all(probes.map((p) => prometheusCheck(fetcher, p.check)));
  const down: Problem[] = [];
  answers.forEach((a, k) => {
    // Reachable and a Prometheus answer: whether the value holds is the analysis' business, later.
    if (!a.reachable || a.value === null)
      down.push({ path: probes[k].path, message: `${probes[k].check.endpoint} cannot answer the query: ${a.detail}` });
  });
  if (down.length) refuse("invalid_strategy", down);
  const ok = planned as Extract<typeof planned, { ok: true }>;
  return { plan: ok.plan, phaseOf: ok.phaseOf };
}
