/**
 * A rollout's strategy, expanded into its plan, and the pure judgements the Rollout object makes
 * over it. Pure: no storage, no clock (`now` is passed in), no I/O.
 *
 * The plan is a list of phases in order. A canary or a wave step releases servers (a wave `by` a
 * label key is one phase per value of the label, so one zone at a time; a ramp is one wave per
 * size); a pause or an analysis step holds the rollout between them. Targets no step releases form
 * a last wave (as Argo's steps end at 100 %). Each target belongs to one phase; the object starts a
 * target only once its phase is the current one, and moves to the next phase once every target of
 * the current one ended (a pause once its bake time passed or it was resumed, an analysis once its
 * checks held through its bake time).
 */
import type { BlockedBy } from "../model/blocked-by";
import { nextOpening } from "../model/windows";
import type { Labels } from "../model/server/labels";
import type { AnalysisCheck, Comparison, StrategyInput, StrategyStep } from "../model/strategy";

/** A plan this long is a mistake (a ramp with a tiny factor over a large fleet). */
const MAX_PHASES = 200;

type PhaseKind = "release" | "pause" | "analysis";

interface Phase {
  /** Index of the step it comes from; steps.length for the implicit last wave. */
  step: number;
  kind: PhaseKind;
  /** What it is, for people: "canary 2", "wave 10 % (zone=eu-1a)". */
  title: string;
  /** Release phases: how many targets. */
  size: number;
  /** A wave `by` a label: the value this phase releases. */
  label?: { key: string; value: string };
}

export interface Plan {
  strategy: StrategyInput;
  phases: Phase[];
}

export interface PlanTarget {
  server_id: string;
  hostname: string;
  labels: Labels;
}

export type PlanResult =
  { ok: true; plan: Plan; phaseOf: Map<string, number> } | { ok: false; problems: { path: string; message: string }[] };

/** "(none)" stands for the servers that lack a wave's label: they go last, as one value. */
const NO_VALUE = "\u{10FFFF}";
const valueName = (v: string) => (v === NO_VALUE ? "(no value)" : v);
const cmp = (a: string, b: string) => (a < b ? -1 : a > b ? 1 : 0);

/**
 * The plan of a strategy over the targets that will run (excluded ones are not given), in their
 * order. Refuses, with the step's path, a step that releases no server (the steps before it
 * released every target, or no target has its canary's labels) and a plan of more than MAX_PHASES.
 */
export function planStrategy(strategy: StrategyInput, targets: PlanTarget[]): PlanResult {
  const problems: { path: string; message: string }[] = [];
  const phases: Phase[] = [];
  const phaseOf = new Map<string, number>();
  const total = targets.length;
  const open = () => targets.filter((t) => !phaseOf.has(t.server_id));
  const release = (step: number, title: string, picked: PlanTarget[], label?: Phase["label"]) => {
    if (picked.length === 0) return;
    for (const t of picked) phaseOf.set(t.server_id, phases.length);
    phases.push({ step, kind: "release", title, size: picked.length, ...(label ? { label } : {}) });
  };
  /** Released in value order, one phase per value of `by`. */
  const releaseBy = (step: number, title: string, picked: PlanTarget[], by: string | undefined) => {
    if (!by) return release(step, title, picked);
    const groups = new Map<string, PlanTarget[]>();
    for (const t of picked) {
      const v = t.labels[by] ?? NO_VALUE;
      groups.set(v, [...(groups.get(v) ?? []), t]);
    }
    for (const v of [...groups.keys()].sort(cmp))
      release(step, `${title} (${by}=${valueName(v)})`, groups.get(v)!, { key: by, value: valueName(v) });
  };
  const byValue = (by: string | undefined, list: PlanTarget[]) =>
    by
      ? [...list].sort((a, b) => cmp(a.labels[by] ?? NO_VALUE, b.labels[by] ?? NO_VALUE) || cmp(a.hostname, b.hostname))
      : list;

  strategy.steps.forEach((step: StrategyStep, i) => {
    const path = `strategy.steps.${i}`;
    const before = phases.length;
    const left = open();
    switch (step.type) {
      case "pause":
        phases.push({
          step: i,
          kind: "pause",
          title: step.duration_s ? `pause ${step.duration_s} s` : "pause until resumed",
          size: 0,
        });
        return;
      case "analysis":
        phases.push({ step: i, kind: "analysis", title: `analysis for ${step.bake_s} s`, size: 0 });
        return;
      case "canary": {
        const pool = step.labels
          ? left.filter((t) => Object.entries(step.labels!).every(([k, v]) => t.labels[k] === v))
          : left;
        const n = step.count ?? Math.max(1, Math.ceil((step.percent! * total) / 100));
        release(i, step.count ? `canary ${step.count}` : `canary ${step.percent} %`, pool.slice(0, n));
        if (phases.length === before)
          problems.push({
            path,
            message: step.labels
              ? `no target left has the labels ${Object.entries(step.labels)
                  .map(([k, v]) => `${k}=${v}`)
                  .join(", ")}`
              : "releases no server: the steps before it released every target",
          });
        return;
      }
      case "wave": {
        if (step.ramp) {
          let size = step.ramp.start;
          let k = 1;
          while (open().length > 0 && phases.length <= MAX_PHASES) {
            const rest = byValue(step.by, open());
            releaseBy(i, `ramp wave ${k} (${Math.min(size, rest.length)})`, rest.slice(0, size), step.by);
            size = Math.ceil(size * step.ramp.factor);
            k++;
          }
        } else if (step.count !== undefined) {
          releaseBy(i, `wave ${step.count}`, byValue(step.by, left).slice(0, step.count), step.by);
        } else {
          const pct = step.percent!;
          const share = (n: number) => (pct >= 100 ? n : Math.ceil((pct * n) / 100));
          if (!step.by) {
            const released = total - left.length;
            release(i, `wave ${pct} %`, left.slice(0, Math.max(0, share(total) - released)));
          } else {
            // Each value of the label reaches the share on its own, so a wave touches every zone, one at a time.
            const byV = new Map<string, { all: number; left: PlanTarget[] }>();
            for (const t of targets) {
              const v = t.labels[step.by] ?? NO_VALUE;
              const e = byV.get(v) ?? { all: 0, left: [] };
              e.all++;
              if (!phaseOf.has(t.server_id)) e.left.push(t);
              byV.set(v, e);
            }
            for (const v of [...byV.keys()].sort(cmp)) {
              const e = byV.get(v)!;
              const want = share(e.all) - (e.all - e.left.length);
              release(i, `wave ${pct} % (${step.by}=${valueName(v)})`, e.left.slice(0, Math.max(0, want)), {
                key: step.by,
                value: valueName(v),
              });
            }
          }
        }
        if (phases.length === before)
          problems.push({ path, message: "releases no server: the steps before it released every target" });
        return;
      }
    }
  });
  const rest = open();
  if (rest.length > 0) release(strategy.steps.length, `the rest (${rest.length})`, rest);
  if (phases.length > MAX_PHASES)
    problems.push({
      path: "strategy.steps",
      message: `the plan has ${phases.length} phases, more than ${MAX_PHASES}: use larger waves or a larger ramp factor`,
    });
  return problems.length ? { ok: false, problems } : { ok: true, plan: { strategy, phases }, phaseOf };
}

/** The step a phase comes from (undefined for the implicit last wave). */
export const stepOf = (plan: Plan, phase: number): StrategyStep | undefined =>
  plan.strategy.steps[plan.phases[phase]?.step ?? -1];

// ---- analysis ----

/** One check's answer at one sample. */
export interface CheckResult {
  /** Index of the check in its analysis step. */
  check: number;
  ok: boolean;
  /** The figure compared (null when none could be read: the endpoint did not answer, …). */
  value: number | null;
  threshold: number | null;
  detail: string;
}

/** Whether `value comparison threshold` holds. */
export function compare(value: number, comparison: Comparison, threshold: number): boolean {
  switch (comparison) {
    case "<":
      return value < threshold;
    case "<=":
      return value <= threshold;
    case ">":
      return value > threshold;
    case ">=":
      return value >= threshold;
    case "==":
      return value === threshold;
    case "!=":
      return value !== threshold;
  }
}

/** A check's name as samples and pages show it. */
export function checkName(c: AnalysisCheck): string {
  switch (c.kind) {
    case "realized":
      return `servers realized and healthy ≥ ${c.min_percent} %`;
    case "failure_percent":
      return `fleet failed or stale ≤ ${c.max_percent} %`;
    case "prometheus":
      return `${c.query} ${c.comparison} ${c.threshold}`;
    case "https":
      return `${c.url} answers 2xx`;
  }
}

/**
 * A Prometheus `/api/v1/query` answer judged against the check: a scalar, or every sample of a
 * vector, must satisfy the comparison. An answer that is no number (an error, an empty vector, a
 * matrix) fails: an analysis that cannot see must not pass.
 */
export function judgePrometheus(
  body: unknown,
  c: { comparison: Comparison; threshold: number },
): { ok: boolean; value: number | null; detail: string } {
  const b = body as { status?: string; error?: string; data?: { resultType?: string; result?: unknown } };
  if (b?.status !== "success") return { ok: false, value: null, detail: `query failed: ${b?.error ?? "no status"}` };
  const num = (pair: unknown) => (Array.isArray(pair) && pair.length === 2 ? Number(pair[1]) : NaN);
  let values: number[];
  if (b.data?.resultType === "scalar") values = [num(b.data.result)];
  else if (b.data?.resultType === "vector" && Array.isArray(b.data.result))
    values = b.data.result.map((s) => num((s as { value?: unknown })?.value));
  else return { ok: false, value: null, detail: `expected a scalar or vector, got ${b.data?.resultType ?? "nothing"}` };
  if (values.length === 0) return { ok: false, value: null, detail: "the query returned no samples" };
  if (values.some((v) => Number.isNaN(v)))
    return { ok: false, value: null, detail: "the query returned a value that is no number" };
  const bad = values.find((v) => !compare(v, c.comparison, c.threshold));
  const value = bad ?? values[0];
  return {
    ok: bad === undefined,
    value,
    detail:
      values.length > 1
        ? `${values.length} series; ${bad === undefined ? "all" : "one is"} ${value}`
        : `${value} ${bad === undefined ? "holds" : "fails"} ${c.comparison} ${c.threshold}`,
  };
}

export type AnalysisVerdict = { state: "running" } | { state: "passed" } | { state: "failed"; reason: string };

/**
 * An analysis after a sample: failed once a check failed more than `failure_limit` samples;
 * passed once the bake time is over (the sample taken at or after `until`) with none over it.
 */
export function judgeAnalysis(
  step: { failure_limit: number; checks: AnalysisCheck[] },
  failures: number[],
  last: CheckResult[],
  sampledAt: number,
  until: number,
): AnalysisVerdict {
  for (const r of last) {
    if (!r.ok && (failures[r.check] ?? 0) > step.failure_limit) {
      return {
        state: "failed",
        reason: `analysis failed: ${checkName(step.checks[r.check])}: ${r.detail}`,
      };
    }
  }
  return sampledAt >= until ? { state: "passed" } : { state: "running" };
}

// ---- why it waits ----

export interface PhaseProgress {
  phase: number;
  started_at: number | null;
  /** The end of a pause's or an analysis' bake time. */
  until: number | null;
}

/**
 * Why a forward rollout does not start targets now, first the one to clear first: an operator's
 * pause, a pause step (until a time, or until resumed), an analysis (its last failing or latest
 * value against its threshold), a closed window.
 */
export function strategyBlockedBy(input: {
  state: string;
  pass: number;
  paused_by: string | null;
  paused_at: number | null;
  plan: Plan | null;
  progress: PhaseProgress | null;
  last: (CheckResult & { name: string })[];
  now: number;
}): BlockedBy[] {
  const { plan, progress, now } = input;
  const iso = (ms: number) => new Date(ms).toISOString();
  const out: BlockedBy[] = [];
  if (input.state === "paused") {
    const phase = plan && progress ? plan.phases[progress.phase] : undefined;
    const byStep = phase?.kind === "pause" && input.paused_by === null;
    out.push({
      kind: "paused",
      message: byStep
        ? `paused by its strategy (step ${phase!.step}): resume it to go on`
        : `paused by ${input.paused_by ?? "an operator"}`,
      ...(input.paused_by ? { by: input.paused_by } : {}),
      ...(input.paused_at ? { since: iso(input.paused_at) } : {}),
    });
  }
  if (input.state !== "running" && input.state !== "paused") return out;
  if (!plan || !progress || input.pass !== 0) return out;
  const phase = plan.phases[progress.phase];
  if (phase?.kind === "pause" && progress.until !== null && input.state === "running") {
    out.push({
      kind: "bake",
      message: `pause step ${phase.step} bakes until ${iso(progress.until)}`,
      until: iso(progress.until),
      ...(progress.started_at ? { since: iso(progress.started_at) } : {}),
    });
  }
  if (phase?.kind === "analysis") {
    const shown = input.last.find((r) => !r.ok) ?? input.last[0];
    out.push({
      kind: "analysis",
      message: shown
        ? `analysis (step ${phase.step}) ${shown.ok ? "holds" : "fails"}: ${shown.name}: ${shown.detail}`
        : `analysis (step ${phase.step}) is taking its first sample`,
      ...(progress.until !== null ? { until: iso(progress.until) } : {}),
      ...(progress.started_at ? { since: iso(progress.started_at) } : {}),
      ...(shown?.value != null ? { value: shown.value } : {}),
      ...(shown?.threshold != null ? { threshold: shown.threshold } : {}),
      ...(shown ? { detail: shown.detail } : {}),
    });
  }
  const windows = plan.strategy.windows ?? [];
  const opens = phase?.kind === "release" ? nextOpening(windows, now) : null;
  if (opens !== null)
    out.push({ kind: "window", message: `no maintenance window is open until ${iso(opens)}`, until: iso(opens) });
  return out;
}
