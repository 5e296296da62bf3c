/**
 * hm rollout start with a strategy from flags or a file, and hm rollout show printing its plan.
 */
import { writeFileSync, mkdtempSync } from "node:fs";
import { createServer } from "node:http";
import type { AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { adminApi, hmRunner } from "./harness.ts";

const hm = hmRunner("strategy");
const AGENT = "fw-agent";

async function fleetOf(n: number) {
  const fleet = `st-${Date.now().toString(36)}`;
  await adminApi("POST", "/v1/fleets", { id: fleet });
  await adminApi("PUT", `/v1/fleets/${fleet}/channels/${AGENT}`, { image: "reg/fw:1", version: "1" });
  await adminApi("PUT", `/v1/fleets/${fleet}/roles/edge`, { agents: [{ name: AGENT }] });
  for (let i = 0; i < n; i++) {
    const s = await adminApi("POST", "/v1/servers", {
      fleet,
      hostname: `${fleet}-${i}.example.com`,
      kind: "managed",
      roles: ["edge"],
      labels: { zone: `z${i % 2}` },
    });
    expect(s.status).toBe(201);
  }
  return fleet;
}

const start = ["rollout", "create", "--agent", AGENT, "--image", "reg/fw:2", "--version", "2"];

describe("hm rollout with a strategy", () => {
  it("builds canary and waves by zone from flags, and show prints the steps with their servers", async () => {
    const fleet = await fleetOf(4);
    const r = await hm([
      ...start,
      "--fleet",
      fleet,
      "--canary",
      "1",
      "--pause",
      "manual",
      "--wave",
      "100%",
      "--by",
      "zone",
    ]);
    expect(r.code, r.stderr).toBe(0);
    expect(r.stdout).toContain("canary 1");
    const id = /rollout\s+([0-9a-f-]{36})/.exec(r.stdout)![1];
    const json = await hm(["--json", "rollout", "show", id]);
    const v = json.json();
    expect(v.strategy.steps).toEqual([
      { type: "canary", count: 1 },
      { type: "pause" },
      { type: "wave", percent: 100, by: "zone" },
    ]);
    expect(v.steps.map((s: { title: string }) => s.title)).toEqual([
      "canary 1",
      "pause until resumed",
      "wave 100 % (zone=z0)",
      "wave 100 % (zone=z1)",
    ]);
    const shown = await hm(["rollout", "show", id]);
    expect(shown.stdout).toMatch(/> 0\s+canary 1\s+running/);
    expect(shown.stdout).toContain(`${fleet}-0.example.com`);
  });

  it("takes a strategy file, and refuses a bad one with its path", async () => {
    const fleet = await fleetOf(2);
    const dir = mkdtempSync(join(tmpdir(), "hm-strategy-"));
    const file = join(dir, "s.json");
    writeFileSync(file, JSON.stringify({ steps: [{ type: "wave", percent: 50, by: "rack" }] }));
    const bad = await hm([...start, "--fleet", fleet, "--strategy", file]);
    expect(bad.code).not.toBe(0);
    expect(bad.stderr).toContain("strategy.steps.0.by");
    expect(bad.stderr).toContain("rack");
    writeFileSync(file, JSON.stringify({ steps: [{ type: "wave", count: 1 }], auto_rollback: true }));
    const ok = await hm(["--json", ...start, "--fleet", fleet, "--strategy", file]);
    expect(ok.code, ok.stderr).toBe(0);
    expect(ok.json().steps.map((s: { size: number }) => s.size)).toEqual([1, 1]);
    const both = await hm([...start, "--fleet", fleet, "--strategy", file, "--canary", "1"]);
    expect(both.code).toBe(2);
  });
});

describe("hm rollout start --window", () => {
  it("sends the windows with the steps, alone as one wave, and refuses a malformed one or a second set", async () => {
    const fleet = await fleetOf(2);
    const alone = await hm(["--json", ...start, "--fleet", fleet, "--window", "Sat,Sun@23:30+60/Europe/Berlin"]);
    expect(alone.code, alone.stderr).toBe(0);
    expect(alone.json().strategy).toEqual({
      steps: [{ type: "wave", percent: 100 }],
      auto_rollback: false,
      windows: [{ days: ["Sat", "Sun"], start_time: "23:30", length_minutes: 60, time_zone: "Europe/Berlin" }],
    });
    const fleet2 = await fleetOf(2);
    const withSteps = await hm([
      "--json",
      ...start,
      "--fleet",
      fleet2,
      "--canary",
      "1",
      "--wave",
      "100%",
      "--window",
      "Mon@02:00+30",
      "--window",
      "Tue@02:00+30",
    ]);
    expect(withSteps.code, withSteps.stderr).toBe(0);
    expect(withSteps.json().strategy.steps).toEqual([
      { type: "canary", count: 1 },
      { type: "wave", percent: 100 },
    ]);
    expect(withSteps.json().strategy.windows.map((w: { days: string[] }) => w.days)).toEqual([["Mon"], ["Tue"]]);

    const fleet3 = await fleetOf(1);
    const bad = await hm([...start, "--fleet", fleet3, "--window", "Sat 23:30"]);
    expect(bad.code).toBe(2);
    expect(bad.stderr).toContain("Sat,Sun@23:30+60");
    const zone = await hm([...start, "--fleet", fleet3, "--window", "Sat@23:30+60/Mars/Olympus"]);
    expect(zone.code).not.toBe(0);
    expect(zone.stderr).toContain("time_zone");
    const dir = mkdtempSync(join(tmpdir(), "hm-strategy-"));
    const file = join(dir, "s.json");
    writeFileSync(
      file,
      JSON.stringify({
        steps: [{ type: "wave", percent: 100 }],
        windows: [{ days: ["Sat"], start_time: "01:00", length_minutes: 60 }],
      }),
    );
    const twice = await hm([...start, "--fleet", fleet3, "--strategy", file, "--window", "Sun@01:00+60"]);
    expect(twice.code).toBe(2);
    expect((await adminApi("GET", `/v1/rollouts?fleet=${fleet3}`)).json.items).toEqual([]);
  });
});

describe("a Prometheus endpoint that hangs", () => {
  it("is refused at creation within a few seconds, with its path, and nothing starts", async () => {
    const fleet = await fleetOf(2);
    // Accepts the connection and never answers.
    const held: import("node:http").ServerResponse[] = [];
    const server = createServer((_req, res) => void held.push(res));
    await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
    const endpoint = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
    try {
      const t0 = Date.now();
      const res = await adminApi("POST", "/v1/rollouts", {
        fleet,
        agent: AGENT,
        image: "reg/fw:2",
        version: "2",
        strategy: {
          steps: [
            { type: "canary", count: 1 },
            {
              type: "analysis",
              checks: [{ kind: "prometheus", endpoint, query: "up", comparison: ">=", threshold: 1 }],
            },
          ],
        },
      });
      const took = Date.now() - t0;
      console.log(`a hanging Prometheus endpoint was refused in ${took} ms`);
      expect(res.status).toBe(422);
      expect(res.json.error.details[0]).toMatchObject({ path: "strategy.steps.1.checks.0.endpoint" });
      expect(res.json.error.details[0].message).toContain("no answer within 3 s");
      expect(took).toBeLessThan(5_000);
      expect(held.length).toBeGreaterThan(0);
      expect((await adminApi("GET", `/v1/rollouts?fleet=${fleet}`)).json.items).toEqual([]);
    } finally {
      for (const r of held) r.destroy();
      server.close();
    }
  });
});

describe("hm rollout start and a fleet spec's default strategy", () => {
  it("follows the default a fleet spec sets for the agent: hm diff shows it, rollout start uses it, --no-fleet-strategy does not", async () => {
    const dir = mkdtempSync(join(tmpdir(), "hm-strategy-spec-"));
    const withDefault = async () => {
      const fleet = await fleetOf(3);
      const spec = {
        apiVersion: "harbormaster/v1",
        kind: "FleetSpec",
        fleet,
        channels: {
          [AGENT]: {
            image: "reg/fw:1",
            version: "1",
            rollout: {
              strategy: {
                steps: [
                  { type: "canary", count: 1 },
                  { type: "wave", percent: 100, by: "zone" },
                ],
              },
            },
          },
        },
      };
      const file = join(dir, `${fleet}.json`);
      writeFileSync(file, JSON.stringify(spec));
      const d = await hm(["diff", "-f", file]);
      expect(d.code, d.stderr).toBe(3);
      expect(d.stdout).toContain(`channels.${AGENT}`);
      expect(d.stdout).toContain('"canary"');
      const a = await hm(["--yes", "apply", "-f", file]);
      expect(a.code, a.stderr).toBe(0);
      // Applied: only what the spec leaves out (the role set by hand) is left, unlisted.
      const again = await hm(["--json", "diff", "-f", file]);
      expect(JSON.parse(again.stdout)[0].items.map((i: { op: string }) => i.op)).toEqual(["unlisted"]);
      return fleet;
    };

    const r = await hm([...start, "--fleet", await withDefault()]);
    expect(r.code, r.stderr).toBe(0);
    expect(r.stdout).toMatch(/strategy\s+the fleet's default for fw-agent \(channels\.fw-agent\.rollout\)/);
    expect(r.stdout).toMatch(/> 0\s+canary 1\s+running/);
    expect(r.stdout).toContain("wave 100 % (zone=z0)");

    const plain = await hm(["--json", ...start, "--fleet", await withDefault(), "--no-fleet-strategy"]);
    expect(plain.code, plain.stderr).toBe(0);
    expect(plain.json()).toMatchObject({ strategy_source: "none", strategy: null, steps: [] });
    const both = await hm([...start, "--fleet", "any", "--no-fleet-strategy", "--canary", "1"]);
    expect(both.code).toBe(2);
    expect(both.stderr).toContain("--no-fleet-strategy starts one wave");
  });
});
