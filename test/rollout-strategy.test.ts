import { describe, expect, it } from "vitest";
import {
  compare,
  judgeAnalysis,
  judgePrometheus,
  planStrategy,
  strategyBlockedBy,
  type PlanTarget,
} from "../src/rollouts/strategy";
import { StrategyInput } from "../src/model/strategy";
import { nextOpening } from "../src/model/windows";

/** 100 targets, 25 in each of 4 zones, in hostname order. */
const fleet = (n = 100, zones = 4): PlanTarget[] =>
  Array.from({ length: n }, (_, i) => ({
    server_id: `s${i}`,
    hostname: `h-${String(i).padStart(3, "0")}`,
    labels: { zone: `z${i % zones}` },
  }));

const parse = (s: unknown) => StrategyInput.parse(s);

describe("a strategy's plan", () => {
  it("canary 2, analysis, then waves of 10, 50 and 100 % zone by zone, every target once", () => {
    const r = planStrategy(
      parse({
        steps: [
          { type: "canary", count: 2 },
          { type: "analysis", checks: [{ kind: "realized" }] },
          { type: "wave", percent: 10, by: "zone" },
          { type: "wave", percent: 50, by: "zone" },
          { type: "wave", percent: 100, by: "zone" },
        ],
      }),
      fleet(),
    );
    if (!r.ok) throw new Error(JSON.stringify(r.problems));
    const { phases } = r.plan;
    expect(phases.map((p) => p.kind).slice(0, 2)).toEqual(["release", "analysis"]);
    expect(phases[0].size).toBe(2);
    // Each wave is one phase per zone, in zone order.
    const waves = phases.slice(2);
    const zones = ["z0", "z1", "z2", "z3"];
    expect(waves.map((p) => p.label?.value)).toEqual([zones, zones, zones].flat());
    expect(waves.every((p) => p.kind === "release")).toBe(true);
    expect(r.phaseOf.size).toBe(100);
    // Cumulative shares per zone: ceil(10 % of 25) = 3 by the end of the first wave.
    const upTo = (last: number) => [...r.phaseOf.values()].filter((ph) => ph <= last).length;
    expect(upTo(5)).toBe(2 + 4 * 3 - 2); // the canary's two count toward their zones' shares
    expect(upTo(phases.length - 1)).toBe(100);
    // One zone per phase.
    for (const [i, p] of phases.entries()) {
      if (!p.label) continue;
      const zones = new Set(
        fleet()
          .filter((t) => r.phaseOf.get(t.server_id) === i)
          .map((t) => t.labels.zone),
      );
      expect([...zones]).toEqual([p.label.value]);
    }
  });

  it("a canary chosen by label takes only servers with it", () => {
    const r = planStrategy(parse({ steps: [{ type: "canary", count: 3, labels: { zone: "z2" } }] }), fleet());
    if (!r.ok) throw new Error("refused");
    const canary = fleet().filter((t) => r.phaseOf.get(t.server_id) === 0);
    expect(canary.map((t) => t.labels.zone)).toEqual(["z2", "z2", "z2"]);
    // The rest goes in one last wave.
    expect(r.plan.phases[1]).toMatchObject({ kind: "release", size: 97, step: 1 });
  });

  it("a ramp grows by its factor until every target is released", () => {
    const r = planStrategy(parse({ steps: [{ type: "wave", ramp: { start: 1, factor: 2 } }] }), fleet(20));
    if (!r.ok) throw new Error("refused");
    expect(r.plan.phases.map((p) => p.size)).toEqual([1, 2, 4, 8, 5]);
  });

  it("refuses, with its path, a step that releases nobody and a canary label no target has", () => {
    const r = planStrategy(
      parse({
        steps: [
          { type: "wave", count: 8 },
          { type: "canary", count: 1, labels: { zone: "z1" } },
          { type: "wave", count: 10 },
        ],
      }),
      fleet(8),
    );
    expect(r.ok).toBe(false);
    if (r.ok) return;
    expect(r.problems.map((p) => p.path)).toEqual(["strategy.steps.1", "strategy.steps.2"]);
    expect(r.problems[0].message).toContain("zone=z1");
  });

  it("refuses a plan of more than 200 phases", () => {
    const r = planStrategy(
      parse({
        steps: [
          { type: "wave", count: 1 },
          { type: "pause", duration_s: 1 },
        ]
          .flatMap((s) => Array(25).fill(s))
          .slice(0, 50),
      }),
      fleet(1000),
    );
    expect(r.ok).toBe(true);
    const many = planStrategy(parse({ steps: [{ type: "wave", ramp: { start: 1, factor: 1.01 } }] }), fleet(30_000));
    expect(many.ok).toBe(false);
  });
});

describe("the strategy schema", () => {
  const paths = (s: unknown) => {
    const r = StrategyInput.safeParse(s);
    return r.success ? [] : r.error.issues.map((i) => i.path.join("."));
  };

  it("refuses a step after 100 %, a share that does not grow, empty steps, and two sizes at once", () => {
    expect(
      paths({
        steps: [
          { type: "wave", percent: 100 },
          { type: "wave", percent: 100 },
        ],
      }),
    ).toEqual(["steps.1"]);
    expect(paths({ steps: [{ type: "wave", percent: 100 }, { type: "pause" }] })).toEqual(["steps.1"]);
    expect(
      paths({
        steps: [
          { type: "wave", percent: 50 },
          { type: "wave", percent: 20 },
        ],
      }),
    ).toEqual(["steps.1.percent"]);
    expect(paths({ steps: [] })).toEqual(["steps"]);
    expect(paths({ steps: [{ type: "canary", count: 2, percent: 5 }] })).toEqual(["steps.0.percent"]);
    expect(paths({ steps: [{ type: "wave" }] })).toEqual(["steps.0.count"]);
    expect(
      paths({
        steps: [
          { type: "wave", ramp: { start: 1, factor: 2 } },
          { type: "wave", count: 1 },
        ],
      }),
    ).toEqual(["steps.1"]);
    expect(paths({ steps: [{ type: "teleport" }] })).toEqual(["steps.0.type"]);
  });

  it("takes a complete strategy with defaults filled in", () => {
    const s = StrategyInput.parse({
      steps: [
        { type: "canary", percent: 5 },
        {
          type: "analysis",
          checks: [
            { kind: "prometheus", endpoint: "https://prom.example", query: "up", comparison: ">=", threshold: 1 },
          ],
        },
        { type: "wave", percent: 100, by: "zone" },
      ],
    });
    expect(s.auto_rollback).toBe(false);
    expect(s.steps[1]).toMatchObject({ bake_s: 60, interval_s: 30, failure_limit: 0 });
  });
});

describe("analysis judgements", () => {
  it("reads Prometheus scalars and vectors; no number fails", () => {
    const c = { comparison: "<" as const, threshold: 0.05 };
    expect(
      judgePrometheus({ status: "success", data: { resultType: "scalar", result: [1, "0.01"] } }, c),
    ).toMatchObject({ ok: true, value: 0.01 });
    expect(
      judgePrometheus(
        {
          status: "success",
          data: {
            resultType: "vector",
            result: [
              { metric: {}, value: [1, "0.01"] },
              { metric: {}, value: [1, "0.2"] },
            ],
          },
        },
        c,
      ),
    ).toMatchObject({ ok: false, value: 0.2 });
    expect(judgePrometheus({ status: "success", data: { resultType: "vector", result: [] } }, c).ok).toBe(false);
    expect(judgePrometheus({ status: "error", error: "parse error" }, c)).toMatchObject({ ok: false, value: null });
    expect(judgePrometheus("nonsense", c).ok).toBe(false);
    expect(compare(1, "!=", 1)).toBe(false);
    expect(compare(1, "==", 1)).toBe(true);
  });

  it("fails past failure_limit, passes once the bake time is over", () => {
    const step = { failure_limit: 1, checks: [{ kind: "realized" as const, min_percent: 100 }] };
    const bad = [{ check: 0, ok: false, value: 50, threshold: 100, detail: "1 of 2" }];
    expect(judgeAnalysis(step, [1], bad, 10, 100).state).toBe("running");
    expect(judgeAnalysis(step, [2], bad, 10, 100)).toMatchObject({ state: "failed" });
    const good = [{ check: 0, ok: true, value: 100, threshold: 100, detail: "2 of 2" }];
    expect(judgeAnalysis(step, [0], good, 99, 100).state).toBe("running");
    expect(judgeAnalysis(step, [0], good, 100, 100).state).toBe("passed");
  });
});

describe("windows and why a rollout waits", () => {
  const monday = Date.parse("2026-11-23T10:00:00Z"); // a Monday
  it("finds the next opening, none while one is open", () => {
    const w = [{ days: ["Tue" as const], start_time: "02:00", length_minutes: 60, time_zone: "UTC" }];
    expect(new Date(nextOpening(w, monday)!).toISOString()).toBe("2026-11-24T02:00:00.000Z");
    expect(nextOpening(w, Date.parse("2026-11-24T02:30:00Z"))).toBeNull();
    expect(nextOpening([], monday)).toBeNull();
    // In the window's own zone, the earliest of several, and past Sunday.
    const ny = { days: ["Tue" as const], start_time: "02:00", length_minutes: 60, time_zone: "America/New_York" };
    expect(new Date(nextOpening([ny], monday)!).toISOString()).toBe("2026-11-24T07:00:00.000Z");
    const sunday = { days: ["Sun" as const], start_time: "23:00", length_minutes: 120, time_zone: "UTC" };
    expect(new Date(nextOpening([sunday, ny], monday)!).toISOString()).toBe("2026-11-24T07:00:00.000Z");
    expect(new Date(nextOpening([sunday], monday)!).toISOString()).toBe("2026-11-29T23:00:00.000Z");
    expect(nextOpening([sunday], Date.parse("2026-11-30T00:30:00Z"))).toBeNull();
  });

  it("says analysis with value and threshold, bake with its end, and a closed window", () => {
    const r = planStrategy(
      parse({
        steps: [
          { type: "canary", count: 1 },
          { type: "analysis", checks: [{ kind: "realized" }] },
          { type: "pause", duration_s: 60 },
          { type: "wave", percent: 100 },
        ],
        windows: [{ days: ["Tue"], start_time: "02:00", length_minutes: 60 }],
      }),
      fleet(4),
    );
    if (!r.ok) throw new Error("refused");
    const base = { state: "running", pass: 0, paused_by: null, paused_at: null, plan: r.plan, now: monday };
    const analysis = strategyBlockedBy({
      ...base,
      progress: { phase: 1, started_at: monday, until: monday + 60_000 },
      last: [{ check: 0, ok: false, value: 50, threshold: 100, detail: "1 of 2", name: "realized" }],
    });
    expect(analysis).toEqual([expect.objectContaining({ kind: "analysis", value: 50, threshold: 100 })]);
    const bake = strategyBlockedBy({
      ...base,
      progress: { phase: 2, started_at: monday, until: monday + 60_000 },
      last: [],
    });
    expect(bake[0]).toMatchObject({ kind: "bake", until: new Date(monday + 60_000).toISOString() });
    const window = strategyBlockedBy({ ...base, progress: { phase: 3, started_at: monday, until: null }, last: [] });
    expect(window[0]).toMatchObject({ kind: "window", until: "2026-11-24T02:00:00.000Z" });
    const paused = strategyBlockedBy({
      ...base,
      state: "paused",
      paused_by: "alice",
      paused_at: monday,
      progress: { phase: 0, started_at: monday, until: null },
      last: [],
    });
    expect(paused[0]).toMatchObject({ kind: "paused", by: "alice" });
  });
});

describe("the rollout page's chart (the history's chart module)", () => {
  it("draws each series with its threshold, rings failing samples, splits at gaps and escapes every text", async () => {
    const { renderLineChart } = await import("../src/history/chart");
    const opts = { title: "a & b", xLabel: "time (UTC)", yLabel: "value", dots: true };
    const svg = renderLineChart(
      [
        {
          name: "errors <script>",
          threshold: 0.05,
          points: [
            { x: 1000, y: 0.01 },
            { x: 2000, y: 0.2, bad: true },
            { x: 3000, y: null },
            { x: 4000, y: 0.02 },
            { x: 5000, y: 0.03 },
          ],
        },
      ],
      opts,
    );
    expect(svg).toContain("a &amp; b</title>");
    expect(svg).not.toContain("<script>");
    expect(svg).toContain("&lt;script&gt;");
    // Two runs of values around the gap; the threshold a dashed line, named in the legend.
    expect(svg.match(/<polyline/g)).toHaveLength(2);
    expect(svg).toMatch(/<line class="threshold"[^>]*stroke-dasharray="4 3"/);
    expect(svg).toContain("errors &lt;script&gt; (threshold 0.05)</text>");
    // One ring for the failing sample, a dot for each other value; the description counts it.
    expect(svg.match(/<circle class="bad"/g)).toHaveLength(1);
    expect(svg.match(/<circle/g)).toHaveLength(4);
    expect(svg).toMatch(/<desc [^>]*>.*1 failing sample, ringed in red\.<\/desc>/);
    // The threshold is inside the drawn range even above every value.
    const high = renderLineChart([{ name: "p95", threshold: 10, points: [{ x: 0, y: 1 }] }], opts);
    expect(high).toMatch(/<text [^>]*>10<\/text>/);
    expect(renderLineChart([], opts)).toContain("No data yet");
  });
});
