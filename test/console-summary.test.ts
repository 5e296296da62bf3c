import { env } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import { call, createFleet, d1Statements, registerServer, report } from "./helpers";

describe("GET /v1/fleets/{fleet}/summary", () => {
  it("counts the fleet's servers by status and by state, with its reboot groups, moving rollouts and data version", async () => {
    const fleet = await createFleet();
    await call("PUT", `/v1/fleets/${fleet.id}/channels/web`, {
      body: { image: "registry.example/web:1", version: "1" },
    });
    await call("PUT", `/v1/fleets/${fleet.id}/roles/web`, { body: { agents: [{ name: "web" }] } });
    const realized = await registerServer(fleet.id, { roles: ["web"] });
    await call("PUT", "/v1/agent/inventory", {
      token: realized.token,
      body: report(1, [{ name: "web", image: "registry.example/web:1" }]),
    });
    const failed = await registerServer(fleet.id, { roles: ["web"] });
    await call("PUT", "/v1/agent/inventory", {
      token: failed.token,
      body: report(1, [], { errors: [{ agent: "web", op: "install", message: "pull failed" }] }),
    });
    await registerServer(fleet.id, { roles: ["web"] });
    const leaving = await registerServer(fleet.id, { roles: ["web"] });
    expect((await call("POST", `/v1/servers/${leaving.id}/decommission`, { body: {} })).status).toBe(200);
    await call("PUT", `/v1/fleets/${fleet.id}/reboot-groups/night`, { body: { slots: 2, paused: true } });

    const res = await call("GET", `/v1/fleets/${fleet.id}/summary`);
    expect(res.status).toBe(200);
    const s = res.json;
    expect(s.fleet).toBe(fleet.id);
    expect(s.servers.total).toBe(4);
    expect(s.servers.by_status).toMatchObject({ realized: 1, failed: 1, unknown: 2 });
    expect(s.servers.by_state).toMatchObject({ active: 2, provisioning: 1, decommissioning: 1, removed: 0 });
    expect(s.reboot_groups).toContainEqual(
      expect.objectContaining({ name: "night", slots: 2, holders: 0, queue_length: 0, paused: true, open_now: false }),
    );
    expect(s.rollouts).toEqual([]);
    expect(s.data).toMatchObject({
      version: expect.any(Number),
      newest_version: expect.any(Number),
      pending: expect.any(Array),
    });
  });

  it("lists a running rollout with its counters", async () => {
    const fleet = await createFleet();
    await call("PUT", `/v1/fleets/${fleet.id}/channels/web`, {
      body: { image: "registry.example/web:1", version: "1" },
    });
    await call("PUT", `/v1/fleets/${fleet.id}/roles/web`, { body: { agents: [{ name: "web" }] } });
    for (let i = 0; i < 2; i++) await registerServer(fleet.id, { roles: ["web"] });
    const started = await call("POST", "/v1/rollouts", {
      body: { fleet: fleet.id, agent: "web", image: "registry.example/web:2", version: "2" },
    });
    expect(started.status).toBe(201);
    const s = (await call("GET", `/v1/fleets/${fleet.id}/summary`)).json;
    expect(s.rollouts).toEqual([
      expect.objectContaining({ id: started.json.id, agent: "web", state: "running", total: 2 }),
    ]);
    expect(s.rollouts[0].counts.queued + s.rollouts[0].counts.applying).toBe(2);
  });

  it("needs a read token and a fleet that exists", async () => {
    expect((await call("GET", "/v1/fleets/nope-nope/summary")).status).toBe(404);
    expect((await call("GET", "/v1/fleets/nope-nope/summary", { token: null })).status).toBe(401);
  });

  it("answers a 10,000-server fleet with the same few D1 statements as a small one, from an index alone", async () => {
    const small = await createFleet();
    await registerServer(small.id);
    const big = await createFleet();
    const now = Date.now();
    // 10,000 index rows in one statement, spread over statuses and states.
    await env.DB.prepare(
      `INSERT INTO servers (id, fleet_id, hostname, kind, roles, reboot_group, state, status, desired_generation, created_at, updated_at)
       WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 10000)
       SELECT printf('00000000-0000-4000-8000-%012d', i), ?1, 'h' || i || '.example.com', 'managed', '[]', 'default',
              CASE WHEN i % 100 = 0 THEN 'decommissioning' ELSE 'active' END,
              CASE i % 4 WHEN 0 THEN 'realized' WHEN 1 THEN 'pending' WHEN 2 THEN 'failed' ELSE 'stale' END,
              1, ?2, ?2 FROM n`,
    )
      .bind(big.id, now)
      .run();

    const cost = async (fleet: string) => {
      const before = await d1Statements();
      const res = await call("GET", `/v1/fleets/${fleet}/summary`);
      const after = await d1Statements();
      expect(res.status).toBe(200);
      return { reads: after.reads - before.reads, writes: after.writes - before.writes, body: res.json };
    };
    const a = await cost(small.id);
    const b = await cost(big.id);
    expect(b.body.servers.total).toBe(10_000);
    expect(b.body.servers.by_status).toMatchObject({ realized: 2500, pending: 2500, failed: 2500, stale: 2500 });
    expect(b.body.servers.by_state).toMatchObject({ active: 9900, decommissioning: 100 });
    expect(b.reads).toBe(a.reads);
    expect(b.reads).toBeLessThanOrEqual(5);
    expect(b.writes).toBe(0);

    const plan = await env.DB.prepare(
      "EXPLAIN QUERY PLAN SELECT state, status, count(*) FROM servers WHERE fleet_id = ? GROUP BY state, status",
    )
      .bind(big.id)
      .all<{ detail: string }>();
    expect(plan.results.map((r) => r.detail).join("\n")).toMatch(/COVERING INDEX servers_fleet_state_status_idx/);
  });
});
