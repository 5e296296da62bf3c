import { runDurableObjectAlarm } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import { consoleFetch, signIn } from "./console-helpers";
import { call, fireTimersNow } from "./helpers";
import { coordinator } from "./support/objects";
import { bodiesOf, hook, receiver, receivedBy } from "./webhook-helpers";
import {
  AGENT,
  drain,
  fleetWithAgent,
  NEW,
  OLD,
  reconcileApplying,
  rolloutStub,
  startRollout,
  targets,
  type Host,
} from "./rollout-helpers";

interface StrategyView {
  state: string;
  pass: number;
  reason: string | null;
  counts: Record<string, number>;
  current_phase: number | null;
  steps: { phase: number; kind: string; title: string; state: string; servers: string[]; label: unknown }[];
  analysis: { name: string; ok: boolean; value: number | null; threshold: number | null; at: string }[];
  blocked_by: { kind: string; message: string; value?: number; threshold?: number }[];
}

async function view(id: string) {
  await drain(id);
  const res = await call("GET", `/v1/rollouts/${id}`);
  expect(res.status).toBe(200);
  return res.json as StrategyView;
}

/** Runs the rollout's alarm (its analysis timer) and waits for the background sample to be judged. */
async function sample(id: string, samplesBefore: number) {
  await runDurableObjectAlarm(rolloutStub(id));
  for (let i = 0; i < 50; i++) {
    const v = await view(id);
    if (v.analysis.length > samplesBefore) return v;
    await new Promise((r) => setTimeout(r, 20));
  }
  throw new Error("no sample was taken");
}

const zoneOf = (i: number) => ({ labels: { zone: `z${i % 2}` } });

const desiredImage = async (h: Host) => {
  const s = await call("GET", `/v1/servers/${h.id}`);
  return {
    image: s.json.desired.agents.find((a: { name: string }) => a.name === AGENT).image,
    generation: s.json.desired.generation,
  };
};

describe("a rollout with a strategy", () => {
  it("starts only the canary, analyses, then releases one zone at a time", async () => {
    const { fleet, hosts } = await fleetWithAgent(6, { server: zoneOf });
    const r = await startRollout({
      fleet,
      strategy: {
        steps: [
          { type: "canary", count: 2 },
          { type: "analysis", bake_s: 0, checks: [{ kind: "realized" }, { kind: "failure_percent", max_percent: 50 }] },
          { type: "wave", percent: 100, by: "zone" },
        ],
      },
    });
    let v = await view(r.id);
    expect(v.counts).toMatchObject({ applying: 2, queued: 4 });
    expect(v.steps.map((s) => `${s.kind}:${s.state}`)).toEqual([
      "release:running",
      "analysis:pending",
      "release:pending",
      "release:pending",
    ]);
    expect(v.steps[0].servers).toHaveLength(2);
    expect(v.steps[2].label).toEqual({ key: "zone", value: "z0" });

    await reconcileApplying(r.id, hosts);
    v = await view(r.id);
    // The canary ended: nothing more starts until the analysis holds.
    expect(v.counts).toMatchObject({ done: 2, queued: 4, applying: 0 });
    expect(v.blocked_by[0]).toMatchObject({ kind: "analysis" });

    v = await sample(r.id, 0);
    expect(v.analysis.map((a) => [a.ok, a.value, a.threshold])).toEqual([
      [true, 100, 100],
      [true, 0, 50],
    ]);
    // Passed (bake 0): the first zone's remaining servers start, the other zone's wait.
    expect(v.current_phase).toBe(2);
    const applying = await targets(r.id, "?state=applying");
    const zones = new Set(applying.map((t) => hosts.findIndex((h) => h.id === t.server_id) % 2));
    expect(zones.size).toBe(1);
    for (let i = 0; i < 4 && v.state === "running"; i++) {
      await reconcileApplying(r.id, hosts);
      v = await view(r.id);
    }
    expect(v.state).toBe("succeeded");
    expect(v.steps.every((s) => s.state === "done")).toBe(true);
  });

  it("fails its analysis on a failing canary and rolls back only the canary by itself", async () => {
    const { fleet, hosts } = await fleetWithAgent(6, { server: zoneOf });
    const before = await Promise.all(hosts.map(desiredImage));
    const events = await hook(fleet, "strategy", [
      "rollout.step_started",
      "rollout.analysis_failed",
      "rollout.rolled_back",
    ]);
    const sent = await receiver(fleet);
    const r = await startRollout({
      fleet,
      strategy: {
        auto_rollback: true,
        steps: [
          { type: "canary", count: 2 },
          { type: "analysis", bake_s: 60, checks: [{ kind: "realized" }] },
          { type: "wave", percent: 50 },
          { type: "wave", percent: 100 },
        ],
      },
    });
    const canary = new Set((await targets(r.id, "?state=applying")).map((t) => t.server_id));
    const failing = [...canary][1];
    await reconcileApplying(r.id, hosts, { fail: (h) => h.id === failing });
    let v = await sample(r.id, 0);
    expect(v.analysis[0]).toMatchObject({ ok: false, value: 50, threshold: 100 });
    expect(v.state).toBe("rolling_back");
    expect(v.pass).toBe(1);
    expect(v.reason).toBeNull();
    // The canary's realized server goes back; the failed one has nothing to undo.
    const back = await targets(r.id, "?pass=1");
    expect(back.map((t) => t.server_id)).toEqual([...canary].filter((id) => id !== failing));
    expect(back[0].image).toBe(OLD);
    await reconcileApplying(r.id, hosts);
    v = await view(r.id);
    expect(v.state).toBe("rolled_back");
    // No server outside the canary was written: same generation, same image.
    for (const [i, h] of hosts.entries()) {
      if (canary.has(h.id)) continue;
      expect(await desiredImage(h)).toEqual(before[i]);
    }
    const eventLog = await call("GET", `/v1/rollouts/${r.id}/events`);
    const kinds = eventLog.json.items.map((e: { kind: string }) => e.kind);
    // Webhooks: each step's start (the analysis' with what it waits for), the failure, the rollback.
    await fireTimersNow(coordinator(fleet));
    expect(receivedBy(sent, events)).toEqual([
      "rollout.step_started",
      "rollout.step_started",
      "rollout.analysis_failed",
      "rollout.rolled_back",
    ]);
    const bodies = bodiesOf(sent, events);
    expect(bodies[1].data.blocked_by).toEqual([expect.objectContaining({ kind: "analysis" })]);
    expect(bodies[2].data).toMatchObject({ value: 50, threshold: 100, auto_rollback: true });
    expect(kinds).toEqual(expect.arrayContaining(["step.started", "analysis.failed", "rollout.auto_rollback"]));
    expect(NEW).not.toBe(OLD);

    // The console's page: the plan with its servers, the analysis as SVG, hostnames, sentences.
    const { cookie } = await signIn();
    const page = await consoleFetch(`/console/rollouts/${r.id}?fleet=${fleet}`, { cookie });
    expect(page.status).toBe(200);
    const html = await page.text();
    const plan = html.slice(
      html.indexOf('id="rollout-plan"'),
      html.indexOf("</section>", html.indexOf('id="rollout-plan"')),
    );
    expect(plan).toContain("canary 2");
    const canaryHost = hosts.find((h) => h.id === failing)!.hostname;
    expect(plan).toContain(canaryHost);
    expect(plan).toMatch(/<svg[^>]*role="img"/);
    expect(plan).toContain("<circle");
    expect(plan).toContain("threshold 100");
    const log = html.slice(html.indexOf('id="rollout-events"'));
    expect(log).toContain(`Analysis of step 1 failed: servers realized and healthy`);
    expect(log).toContain("Rolling back by itself");
    expect(log).toContain(`>${canaryHost}</a>`);
    // No raw JSON, no fragment of a server's id.
    expect(log.slice(0, log.indexOf("</table>"))).not.toMatch(/[{}]|"pass"/);
    for (const h of hosts) expect(log.slice(0, log.indexOf("</table>"))).not.toContain(`>${h.id.slice(0, 8)}<`);
    const table = html.slice(html.indexOf('id="rollout-targets"'));
    expect(table).toContain(hosts[0].hostname);
  });

  it("pauses at a pause step until resumed, saying so", async () => {
    const { fleet, hosts } = await fleetWithAgent(3);
    const r = await startRollout({
      fleet,
      strategy: { steps: [{ type: "canary", count: 1 }, { type: "pause" }, { type: "wave", percent: 100 }] },
    });
    await reconcileApplying(r.id, hosts);
    let v = await view(r.id);
    expect(v.state).toBe("paused");
    expect(v.blocked_by[0]).toMatchObject({ kind: "paused" });
    expect(v.blocked_by[0].message).toContain("strategy");
    const resumed = await call("POST", `/v1/rollouts/${r.id}/resume`);
    expect(resumed.status).toBe(200);
    v = await view(r.id);
    expect(v.state).toBe("running");
    expect(v.counts).toMatchObject({ done: 1, applying: 2 });
  });
});

describe("bad strategies are refused with paths, and nothing starts", () => {
  const refused = async (fleet: string, strategy: unknown) => {
    const res = await call("POST", "/v1/rollouts", {
      body: { fleet, agent: AGENT, image: NEW, version: "2.0.0", strategy },
    });
    const list = await call("GET", `/v1/rollouts?fleet=${fleet}`);
    expect(list.json.items).toEqual([]);
    const ch = await call("GET", `/v1/fleets/${fleet}/channels/${AGENT}`);
    expect(ch.json?.image).not.toBe(NEW);
    return res;
  };

  it("a wave after 100 %, an unknown label key, a label nobody has, an unreachable query endpoint", async () => {
    const { fleet } = await fleetWithAgent(3, { server: zoneOf });
    let res = await refused(fleet, {
      steps: [
        { type: "wave", percent: 100 },
        { type: "wave", percent: 100 },
      ],
    });
    expect(res.status).toBe(400);
    expect(res.json.error.details).toEqual([expect.objectContaining({ path: "strategy.steps.1" })]);

    res = await refused(fleet, { steps: [{ type: "wave", percent: 50, by: "rack" }] });
    expect(res.status).toBe(422);
    expect(res.json.error.code).toBe("invalid_strategy");
    expect(res.json.error.details).toEqual([
      { path: "strategy.steps.0.by", message: expect.stringContaining("'rack'") },
    ]);

    res = await refused(fleet, { steps: [{ type: "canary", count: 1, labels: { zone: "z9" } }] });
    expect(res.status).toBe(422);
    expect(res.json.error.details[0].path).toBe("strategy.steps.0");

    const started = Date.now();
    res = await refused(fleet, {
      steps: [
        { type: "canary", count: 1 },
        {
          type: "analysis",
          checks: [{ kind: "prometheus", endpoint: "http://127.0.0.1:9", query: "up", comparison: ">=", threshold: 1 }],
        },
      ],
    });
    expect(res.status).toBe(422);
    expect(res.json.error.details[0].path).toBe("strategy.steps.1.checks.0.endpoint");
    expect(Date.now() - started).toBeLessThan(5_000);

    res = await refused(fleet, { steps: [] });
    expect(res.status).toBe(400);
    res = await refused(fleet, {
      steps: [{ type: "analysis", checks: [{ kind: "https", url: "http://example.com/ok" }] }],
    });
    expect(res.status).toBe(400);
    expect(res.json.error.details[0].path).toBe("strategy.steps.0.checks.0.url");
  });
});
