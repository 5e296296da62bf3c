/**
 * `npm run sim:canary` against the suite's server: 100 servers in 4 zones, canary 2 → analysis
 * (realized and a Prometheus query against an endpoint this test serves) → waves by zone. The new
 * image fails on a tenth of the hosts, one of the canary among them.
 */
import { describe, expect, inject, it } from "vitest";
import { runCanaryScenario } from "../sim/canary.ts";

describe("progressive delivery, simulated", () => {
  it("a failing canary fails its analysis, the rollout rolls back by itself, no server outside the canary is written", async () => {
    const r = await runCanaryScenario({ url: inject("hmUrl"), token: inject("hmAdmin"), timeoutS: 90 });
    expect(r.canary).toHaveLength(2);
    expect(r.failing).toHaveLength(10);
    expect(r.failing).toContain(r.canary[1]);
    expect(r.state).toBe("rolled_back");
    expect(r.reason).toBeNull();
    expect(r.writtenOutsideCanary).toEqual([]);
    expect(r.events).toEqual(expect.arrayContaining(["step.started", "analysis.failed", "rollout.auto_rollback"]));
    const realized = r.analysis.find((a) => a.name.startsWith("servers realized"))!;
    expect(realized).toMatchObject({ ok: false, value: 50, threshold: 100 });
    // The Prometheus check was asked at creation and sampled: its value is the endpoint's.
    const prom = r.analysis.find((a) => a.name.includes("http_errors_total"))!;
    expect(prom).toMatchObject({ ok: true, value: 0.01, threshold: 0.05 });
    expect(r.prometheusCalls).toBeGreaterThanOrEqual(2);
    console.log(`canary scenario: rolled back in ${r.tookMs} ms (100 servers registered, 2 written)`);
  }, 180_000);
});
