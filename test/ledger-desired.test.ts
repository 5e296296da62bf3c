import { env, evictDurableObject } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import { applyDesired } from "../src/ledger/desired";
import type { DesiredState } from "../src/model/server/record";
import { call, createFleet, registerServer } from "./helpers";

const agents = (image: string) => [{ name: "compute", image, version: image.split(":")[1] }];

describe("applyDesired (pure generation rules)", () => {
  const current: DesiredState = {
    generation: 5,
    agents: [{ name: "compute", image: "c:1", version: "1", instance_id: "11111111-1111-4111-8111-111111111111" }],
    lifecycle: "run",
    updated_at: 0,
  };

  it("accepts a higher generation and keeps the instance id of an agent it already had", () => {
    const out = applyDesired(current, { generation: 6, agents: agents("c:2"), lifecycle: "run" }, 1);
    expect(out.kind).toBe("accepted");
    if (out.kind === "accepted") expect(out.next.agents[0].instance_id).toBe(current.agents[0].instance_id);
  });

  it("treats the same generation with identical content as unchanged, ids omitted or given", () => {
    expect(applyDesired(current, { generation: 5, agents: agents("c:1"), lifecycle: "run" }, 1).kind).toBe("unchanged");
    const withId = [{ ...agents("c:1")[0], instance_id: current.agents[0].instance_id }];
    expect(applyDesired(current, { generation: 5, agents: withId, lifecycle: "run" }, 1).kind).toBe("unchanged");
  });

  it("calls the same generation with different image, lifecycle, agent set or instance id a conflict", () => {
    const conflict = (input: Parameters<typeof applyDesired>[1]) => applyDesired(current, input, 1).kind;
    expect(conflict({ generation: 5, agents: agents("c:2"), lifecycle: "run" })).toBe("generation_conflict");
    expect(conflict({ generation: 5, agents: agents("c:1"), lifecycle: "terminate" })).toBe("generation_conflict");
    expect(conflict({ generation: 5, agents: [], lifecycle: "run" })).toBe("generation_conflict");
    const otherId = [{ ...agents("c:1")[0], instance_id: "22222222-2222-4222-8222-222222222222" }];
    expect(conflict({ generation: 5, agents: otherId, lifecycle: "run" })).toBe("generation_conflict");
  });

  it("refuses a lower generation as stale", () => {
    expect(applyDesired(current, { generation: 4, agents: agents("c:9"), lifecycle: "run" }, 1).kind).toBe(
      "stale_generation",
    );
  });
});

describe("PUT /v1/servers/{id}/desired", () => {
  it("applies every generation rule over HTTP", async () => {
    const fleet = await createFleet();
    const s = await registerServer(fleet.id);
    const path = `/v1/servers/${s.id}/desired`;

    const accepted = await call("PUT", path, { body: { generation: 2, agents: agents("c:1") } });
    expect(accepted.status).toBe(200);
    expect(accepted.json).toMatchObject({ server_id: s.id, generation: 2, lifecycle: "run" });
    const instanceId = accepted.json.agents[0].instance_id;
    expect(instanceId).toMatch(/^[0-9a-f-]{36}$/);

    const again = await call("PUT", path, { body: { generation: 2, agents: agents("c:1") } });
    expect(again.status).toBe(200);
    expect(again.json.agents[0].instance_id).toBe(instanceId);

    const conflict = await call("PUT", path, { body: { generation: 2, agents: agents("c:2") } });
    expect(conflict.status).toBe(409);
    expect(conflict.json.error.code).toBe("generation_conflict");

    const stale = await call("PUT", path, { body: { generation: 1, agents: agents("c:3") } });
    expect(stale.status).toBe(409);
    expect(stale.json.error.code).toBe("stale_generation");

    const next = await call("PUT", path, { body: { generation: 7, agents: agents("c:4") } });
    expect(next.status).toBe(200);
    expect(next.json.agents[0].instance_id).toBe(instanceId);

    const got = await call("GET", path);
    expect(got.json).toMatchObject({ generation: 7, agents: [{ name: "compute", image: "c:4" }] });
  });

  it("lets exactly one of 20 concurrent PUTs of one generation with different content win", async () => {
    const fleet = await createFleet();
    const s = await registerServer(fleet.id);
    const results = await Promise.all(
      Array.from({ length: 20 }, (_, i) =>
        call("PUT", `/v1/servers/${s.id}/desired`, { body: { generation: 2, agents: agents(`c:${i}`) } }),
      ),
    );
    const winners = results.filter((r) => r.status === 200);
    expect(winners).toHaveLength(1);
    expect(results.filter((r) => r.status === 409 && r.json.error.code === "generation_conflict")).toHaveLength(19);
    const stored = await call("GET", `/v1/servers/${s.id}/desired`);
    expect(stored.json.agents[0].image).toBe(winners[0].json.agents[0].image);
  });

  it("loses nothing when the ledger is evicted between writes", async () => {
    const fleet = await createFleet();
    const s = await registerServer(fleet.id);
    const stub = env.LEDGER.get(env.LEDGER.idFromName(s.id));
    const first = await call("PUT", `/v1/servers/${s.id}/desired`, { body: { generation: 2, agents: agents("c:1") } });
    await evictDurableObject(stub);
    const report = await call("PUT", "/v1/agent/inventory", {
      token: s.token,
      body: {
        generation: 2,
        reconciled_at: new Date().toISOString(),
        boot_id: "b1",
        agents: [
          {
            name: "compute",
            image: "c:1",
            version: "1",
            instance_id: first.json.agents[0].instance_id,
            state: "running",
          },
        ],
      },
    });
    expect(report.status).toBe(200);
    await evictDurableObject(stub);
    const second = await call("PUT", `/v1/servers/${s.id}/desired`, { body: { generation: 2, agents: agents("c:2") } });
    expect(second.json.error.code).toBe("generation_conflict");
    await evictDurableObject(stub);
    const view = await call("GET", `/v1/servers/${s.id}`);
    expect(view.json).toMatchObject({ status: "realized", desired_generation: 2, reported_generation: 2 });
    expect(view.json.desired.agents[0]).toMatchObject({ image: "c:1", instance_id: first.json.agents[0].instance_id });
  });

  it("answers 404 for a server that does not exist", async () => {
    const res = await call("PUT", `/v1/servers/${crypto.randomUUID()}/desired`, {
      body: { generation: 2, agents: [] },
    });
    expect(res.status).toBe(404);
    expect(res.json.error.code).toBe("not_found");
  });
});
