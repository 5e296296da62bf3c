/**
 * GET /v1/status (docs/operator-guide.md): hm status in one request. Counts come from the server, the lists of
 * servers that need a look are capped with their full count beside them, rollouts in progress are
 * there while they run.
 */
import { describe, expect, it } from "vitest";
import { call, createFleet, registerServer, report } from "./helpers";
import { fleetWithAgent, startRollout } from "./rollout-helpers";

const A = { name: "a", image: "a:1", version: "1" };

describe("GET /v1/status", () => {
  it("counts a fleet's servers by status and state on the server, and caps the lists that need a look with their full count", async () => {
    const { id: fleet } = await createFleet();
    const failing = ["f-3", "f-1", "f-2"].map((n) => `${n}.example.com`);
    for (const hostname of failing) {
      const s = await registerServer(fleet, { hostname });
      await call("PUT", `/v1/servers/${s.id}/desired`, { body: { generation: 2, agents: [A] } });
      await call("PUT", "/v1/agent/inventory", {
        token: s.token,
        body: report(2, [], { errors: [{ agent: "a", op: "install", message: "no" }] }),
      });
    }
    await registerServer(fleet, { hostname: "quiet.example.com" });
    const res = await call("GET", `/v1/status?fleet=${fleet}&attention=2`);
    expect(res.status).toBe(200);
    const [f] = res.json.fleets;
    expect(f.servers).toEqual({
      total: 4,
      by_status: { failed: 3, unknown: 1 },
      by_state: { active: 3, provisioning: 1 },
    });
    const failed = f.attention.find((a: any) => a.status === "failed");
    expect(failed.count).toBe(3);
    expect(failed.items.map((s: any) => s.hostname)).toEqual(["f-1.example.com", "f-2.example.com"]);
    expect(f.attention.map((a: any) => a.status)).toEqual(["failed", "stale", "drifted"]);
    expect(res.json.data).toMatchObject({ state: "current" });
    expect(res.json.more_fleets).toBe(false);
  });

  it("shows the rollouts in progress; without ?fleet= it covers every fleet; an unknown fleet is 404", async () => {
    const { fleet } = await fleetWithAgent(2);
    const r = await startRollout({ fleet, concurrency: 1 });
    const one = await call("GET", `/v1/status?fleet=${fleet}`);
    expect(one.json.fleets[0].rollouts).toMatchObject([{ id: r.id, agent: "fw-agent", state: "running" }]);
    const all = await call("GET", "/v1/status");
    expect(all.json.fleets.map((x: any) => x.id)).toContain(fleet);
    expect((await call("GET", "/v1/status?fleet=no-such-fleet")).status).toBe(404);
  });
});
