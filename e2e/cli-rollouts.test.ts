/**
 * hm rollout … against the worker (docs/rollouts.md): start, watch with its exit codes, status, rollback,
 * the list. Hosts are stand-ins that reconcile at once (one fails to pull the new image).
 */
import { describe, expect, inject, it } from "vitest";
import { Api } from "../cli/api.ts";
import { hmRunner } from "./harness.ts";

const url = inject("hmUrl");
const admin = inject("hmAdmin");
const api = new Api(url, admin);
const hm = hmRunner("rollout");

const AGENT = "fw-agent";

/** A host that reconciles whatever generation it is given; `fail` reports the agent's update failing. */
async function reconcile(token: string, fail: boolean) {
  const headers = { Authorization: `Bearer ${token}`, "Content-Type": "application/json" };
  const cfg = (await (await fetch(`${url}/v1/agent/desired`, { headers })).json()) as {
    generation: number;
    agents: Record<string, string>[];
  };
  const agents = cfg.agents.filter((a) => !(fail && a.name === AGENT)).map((a) => ({ ...a, state: "running" }));
  await fetch(`${url}/v1/agent/inventory`, {
    method: "PUT",
    headers,
    body: JSON.stringify({
      generation: cfg.generation,
      reconciled_at: new Date().toISOString(),
      boot_id: "b-1",
      agents,
      errors: fail ? [{ agent: AGENT, op: "update", message: "image pull failed" }] : [],
      assignments: { units: [], storage: [] },
    }),
  });
  return cfg.generation as number;
}

describe("hm rollout", () => {
  it("start, watch (exit 1 on an abort), status, rollback, watch (exit 0), list", async () => {
    const fleet = `ro-${Date.now().toString(36)}`;
    await api.createFleet({ id: fleet });
    const put = (path: string, body: unknown) =>
      fetch(`${url}${path}`, {
        method: "PUT",
        headers: { Authorization: `Bearer ${admin}`, "Content-Type": "application/json" },
        body: JSON.stringify(body),
      });
    expect((await put(`/v1/fleets/${fleet}/channels/${AGENT}`, { image: "reg/fw:1", version: "1" })).ok).toBe(true);
    expect((await put(`/v1/fleets/${fleet}/roles/edge`, { agents: [{ name: AGENT }] })).ok).toBe(true);
    const hosts: { id: string; token: string; fail: boolean; seen: number }[] = [];
    for (let i = 0; i < 3; i++) {
      const s = await api.registerServer({ fleet, hostname: `ro${i}.example.com`, kind: "managed", roles: ["edge"] });
      hosts.push({ id: s.id, token: s.token, fail: false, seen: await reconcile(s.token, false) });
    }

    const started = await hm([
      "--json",
      "rollout",
      "start",
      "--fleet",
      fleet,
      "--agent",
      AGENT,
      "--image",
      "reg/fw:2",
      "--version",
      "2",
      "--concurrency",
      "1",
      "--max-failures",
      "0",
    ]);
    expect(started.code).toBe(0);
    const id = started.json().id as string;
    // The second server to be targeted fails.
    const order = (await api.rolloutTargets(id)).map((t) => t.server_id);
    hosts.find((h) => h.id === order[1])!.fail = true;

    let running = true;
    const hostLoop = (async () => {
      while (running) {
        for (const h of hosts) {
          const g = (await api.getServer(h.id)).desired_generation;
          if (g > h.seen) h.seen = await reconcile(h.token, h.fail);
        }
        await new Promise((r) => setTimeout(r, 100));
      }
    })();
    try {
      const watched = await hm(["rollout", "watch", id, "--timeout", "60"]);
      expect(watched.code).toBe(1);
      expect(watched.stderr).toMatch(/rollout .* failed: 1 failed target\(s\) exceed max_failures 0/);

      const status = await hm(["rollout", "status", id]);
      expect(status.code).toBe(0);
      expect(status.stdout).toMatch(/image pull failed/);
      expect(status.stdout).toMatch(/1 done, 0 applying, 0 queued, 1 failed, 0 timed out, 1 skipped/);

      expect((await hm(["--yes", "rollout", "rollback", id])).code).toBe(0);
      const back = await hm(["--json", "rollout", "watch", id, "--timeout", "60"]);
      expect(back.code).toBe(0);
      expect(back.json()).toMatchObject({ state: "rolled_back", counts: { done: 1 } });
    } finally {
      running = false;
      await hostLoop;
    }
    const list = await hm(["--json", "rollouts", "--fleet", fleet]);
    expect(list.json().map((r: { id: string }) => r.id)).toEqual([id]);
    const missing = await hm(["rollout", "pause", crypto.randomUUID()]);
    expect(missing.code).toBe(1);
    expect(missing.stderr).toMatch(/not_found/);
  });
});
