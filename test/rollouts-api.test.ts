import { describe, expect, it } from "vitest";
import { call } from "./helpers";
import { consoleFetch, signIn } from "./console-helpers";
import {
  AGENT,
  fleetWithAgent,
  getRollout,
  NEW,
  OLD,
  reconcileApplying,
  startRollout,
  targets,
} from "./rollout-helpers";

describe("a rollout through the HTTP API", () => {
  it("moves every target to the new image, concurrency at a time, and succeeds", async () => {
    const { fleet, hosts } = await fleetWithAgent(5);
    const r = await startRollout({ fleet, concurrency: 2 });
    expect(r.counts).toMatchObject({ queued: 3, applying: 2 });
    let rounds = 0;
    while ((await getRollout(r.id)).state === "running" && rounds++ < 10) {
      const n = await reconcileApplying(r.id, hosts);
      expect(n).toBeLessThanOrEqual(2);
    }
    const done = await getRollout(r.id);
    expect(done.state).toBe("succeeded");
    expect(done.counts).toMatchObject({ done: 5, queued: 0, applying: 0 });
    for (const h of hosts) {
      const s = await call("GET", `/v1/servers/${h.id}`);
      expect(s.json.desired.agents.find((a: any) => a.name === AGENT).image).toBe(NEW);
      expect(s.json.status).toBe("realized");
    }
    const ts = await targets(r.id);
    expect(ts.every((t) => t.from_image === OLD && t.image === NEW)).toBe(true);
  });
});

describe("who started a rollout, by name", () => {
  it("answers the token's name beside its id, in the rollout, the list and the console's pages", async () => {
    const { fleet } = await fleetWithAgent(2);
    const deployer = await call("POST", "/v1/tokens", { body: { name: "deployer-ci", scope: "write" } });
    expect(deployer.status).toBe(201);
    const created = await call("POST", "/v1/rollouts", {
      token: deployer.json.token,
      body: { fleet, agent: AGENT, image: NEW, version: "2.0.0" },
    });
    expect(created.status).toBe(201);
    expect(created.json.created_by).toBe(`token:${deployer.json.id}`);
    expect(created.json.created_by_name).toBe("deployer-ci");
    expect((await getRollout(created.json.id)).created_by_name).toBe("deployer-ci");
    const list = await call("GET", `/v1/rollouts?fleet=${fleet}`);
    expect(list.json.items.map((r: any) => r.created_by_name)).toEqual(["deployer-ci"]);

    const { cookie } = await signIn();
    for (const path of [`/console/rollouts?fleet=${fleet}`, `/console/rollouts/${created.json.id}?fleet=${fleet}`]) {
      const html = await (await consoleFetch(path, { cookie })).text();
      expect(html, path).toContain("<strong>deployer-ci</strong>");
      expect(html, path).not.toMatch(/>token:[0-9a-f-]{36}</);
    }
  });

  it("names the deployment's admin token as such", async () => {
    const { fleet } = await fleetWithAgent(1);
    const r = await startRollout({ fleet });
    expect((await getRollout(r.id)).created_by_name).toBe("ADMIN_TOKEN");
  });
});
