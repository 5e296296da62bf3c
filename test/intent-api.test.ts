import { env } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import { call, createFleet, registerServer } from "./helpers";

async function channel(fleet: string, agent: string, image: string, version = image.split(":")[1] ?? "1") {
  const res = await call("PUT", `/v1/fleets/${fleet}/channels/${agent}`, { body: { image, version } });
  expect(res.status).toBe(200);
  return res.json;
}

describe("agent channels", () => {
  it("keeps the image the fleet wants per agent, with the history of its changes", async () => {
    const f = await createFleet();
    expect((await channel(f.id, "fw", "fw:1")).changed).toBe(true);
    expect((await channel(f.id, "fw", "fw:1")).changed).toBe(false);
    expect((await channel(f.id, "fw", "fw:2")).changed).toBe(true);
    await channel(f.id, "base", "base:7");

    const one = await call("GET", `/v1/fleets/${f.id}/channels/fw`);
    expect(one.status).toBe(200);
    expect(one.json).toMatchObject({ agent: "fw", image: "fw:2", version: "2" });
    expect(one.json.history.map((h: any) => [h.image, h.previous?.image ?? null])).toEqual([
      ["fw:2", "fw:1"],
      ["fw:1", null],
    ]);
    const page1 = await call("GET", `/v1/fleets/${f.id}/channels/fw?limit=1`);
    expect(page1.json.history).toHaveLength(1);
    const page2 = await call("GET", `/v1/fleets/${f.id}/channels/fw?limit=1&cursor=${page1.json.next_cursor}`);
    expect(page2.json.history.map((h: any) => h.image)).toEqual(["fw:1"]);

    const all = await call("GET", `/v1/fleets/${f.id}/channels`);
    expect(all.json.items.map((c: any) => `${c.agent}=${c.image}`)).toEqual(["base=base:7", "fw=fw:2"]);
    const audit = await call("GET", `/v1/audit?target=fleet:${f.id}`);
    expect(audit.json.items.filter((a: any) => a.action === "channel.put")).toHaveLength(3);
  });

  it("refuses bad input and unknown fleets without writing", async () => {
    const f = await createFleet();
    expect(
      (await call("PUT", `/v1/fleets/${f.id}/channels/fw`, { body: { image: "", version: "1" } })).json.error.code,
    ).toBe("validation_failed");
    expect(
      (await call("PUT", `/v1/fleets/${f.id}/channels/Bad Name`, { body: { image: "x:1", version: "1" } })).status,
    ).toBe(400);
    expect(
      (await call("PUT", `/v1/fleets/nope-${Date.now()}/channels/fw`, { body: { image: "x:1", version: "1" } })).status,
    ).toBe(404);
    expect((await call("GET", `/v1/fleets/${f.id}/channels/fw`)).status).toBe(404);
    expect((await call("GET", `/v1/fleets/${f.id}/channels`)).json.items).toEqual([]);
  });
});

describe("role profiles", () => {
  it("stores a role's agents with their conditions; replacing with the same changes nothing; delete removes it", async () => {
    const f = await createFleet();
    await channel(f.id, "base", "base:1");
    await channel(f.id, "fw-agent", "fw:1");
    const body = { agents: [{ name: "base" }, { name: "fw-agent", when: "firewall" }] };
    const put = await call("PUT", `/v1/fleets/${f.id}/roles/compute`, { body });
    expect(put.status).toBe(200);
    expect(put.json).toMatchObject({ role: "compute", changed: true, agents: body.agents });
    expect((await call("PUT", `/v1/fleets/${f.id}/roles/compute`, { body })).json.changed).toBe(false);
    expect((await call("GET", `/v1/fleets/${f.id}/roles/compute`)).json.agents).toEqual(body.agents);
    expect((await call("GET", `/v1/fleets/${f.id}/roles`)).json.items.map((r: any) => r.role)).toEqual(["compute"]);
    expect((await call("DELETE", `/v1/fleets/${f.id}/roles/compute`)).status).toBe(204);
    expect((await call("GET", `/v1/fleets/${f.id}/roles/compute`)).status).toBe(404);
    expect((await call("DELETE", `/v1/fleets/${f.id}/roles/compute`)).status).toBe(404);
  });

  it("refuses an agent without a channel (422 unknown_channel), a bad condition, a duplicate agent", async () => {
    const f = await createFleet();
    await channel(f.id, "base", "base:1");
    const missing = await call("PUT", `/v1/fleets/${f.id}/roles/r1`, {
      body: { agents: [{ name: "base" }, { name: "ghost" }] },
    });
    expect(missing.status).toBe(422);
    expect(missing.json.error).toMatchObject({ code: "unknown_channel", details: { agents: ["ghost"] } });
    const bad = await call("PUT", `/v1/fleets/${f.id}/roles/r1`, { body: { agents: [{ name: "base", when: "!!x" }] } });
    expect(bad.json.error.code).toBe("validation_failed");
    const dup = await call("PUT", `/v1/fleets/${f.id}/roles/r1`, {
      body: { agents: [{ name: "base" }, { name: "base" }] },
    });
    expect(dup.json.error.code).toBe("duplicate_agent");
    expect((await call("GET", `/v1/fleets/${f.id}/roles/r1`)).status).toBe(404);
  });
});

describe("PATCH /v1/fleets/{fleet}", () => {
  it("merges capabilities (null removes a key) and replaces settings", async () => {
    const f = await createFleet({ capabilities: { firewall: true, object_storage: true } });
    const res = await call("PATCH", `/v1/fleets/${f.id}`, {
      body: {
        capabilities: { object_storage: null, gpu: true },
        stale_after_s: 120,
        allow_unknown_ids: true,
        default_group_slots: 2,
      },
    });
    expect(res.status).toBe(200);
    expect(res.json).toMatchObject({
      capabilities: { firewall: true, gpu: true },
      stale_after_s: 120,
      allow_unknown_ids: true,
      default_group_slots: 2,
    });
    expect(res.json.capabilities).not.toHaveProperty("object_storage");
    const got = await call("GET", `/v1/fleets/${f.id}`);
    expect(got.json).toMatchObject({ capabilities: { firewall: true, gpu: true }, stale_after_s: 120 });
    const audit = await call("GET", `/v1/audit?target=fleet:${f.id}`);
    expect(audit.json.items.filter((a: any) => a.action === "fleet.patch")).toHaveLength(1);
  });

  it("refuses an empty or invalid patch and changes nothing", async () => {
    const f = await createFleet({ capabilities: { firewall: true } });
    for (const body of [{}, { stale_after_s: 1 }, { capabilities: { Bad: true } }, { id: "x" }]) {
      const res = await call("PATCH", `/v1/fleets/${f.id}`, { body });
      expect(res.status, JSON.stringify(body)).toBe(400);
    }
    expect((await call("GET", `/v1/fleets/${f.id}`)).json).toMatchObject({
      capabilities: { firewall: true },
      stale_after_s: 300,
    });
    expect((await call("PATCH", `/v1/fleets/nope-${Date.now()}`, { body: { stale_after_s: 60 } })).status).toBe(404);
  });

  it("reaches the coordinator: allow_unknown_ids takes effect on the FleetLock host path", async () => {
    const f = await createFleet({ default_group_slots: 1 });
    const key = await call("POST", `/v1/fleets/${f.id}/fleetlock-key`);
    const base = key.json.base_url as string;
    const pre = () =>
      call("POST", `${new URL(base).pathname}v1/pre-reboot`, {
        token: null,
        headers: { "fleet-lock-protocol": "true" },
        rawBody: JSON.stringify({ client_params: { id: "stranger", group: "default" } }),
      });
    expect((await pre()).status).toBe(403);
    await call("PATCH", `/v1/fleets/${f.id}`, { body: { allow_unknown_ids: true } });
    expect((await pre()).status).toBe(200);
  });
});

describe("coordinator tasks", () => {
  it("a settings push the coordinator missed is finished by the cron from the task row", async () => {
    const f = await createFleet({ default_group_slots: 1 });
    const key = await call("POST", `/v1/fleets/${f.id}/fleetlock-key`);
    const path = new URL(key.json.base_url as string).pathname;
    const pre = () =>
      call("POST", `${path}v1/pre-reboot`, {
        token: null,
        headers: { "fleet-lock-protocol": "true" },
        rawBody: JSON.stringify({ client_params: { id: "stranger", group: "default" } }),
      });
    expect((await pre()).status).toBe(403);
    // As if a PATCH committed in D1 (row and task) and the worker died before telling the coordinator.
    await env.DB.batch([
      env.DB.prepare("UPDATE fleets SET allow_unknown_ids = 1 WHERE id = ?").bind(f.id),
      env.DB.prepare(
        "INSERT INTO fleet_tasks (fleet_id, kind, rev, created_at) VALUES (?, 'push_settings', 1, 0)",
      ).bind(f.id),
    ]);
    expect((await pre()).status).toBe(403);
    const { runScheduled } = await import("../src/scheduled");
    const { createScheduledController } = await import("cloudflare:test");
    await runScheduled(createScheduledController({ scheduledTime: Date.now() }), env);
    expect((await pre()).status).toBe(200);
    expect(await env.DB.prepare("SELECT COUNT(*) AS n FROM fleet_tasks WHERE fleet_id = ?").bind(f.id).first("n")).toBe(
      0,
    );
  });
});

describe("DELETE /v1/fleets/{fleet}", () => {
  it("is refused with 409 naming the servers that are not removed, and changes nothing", async () => {
    const f = await createFleet();
    const s = await registerServer(f.id);
    const res = await call("DELETE", `/v1/fleets/${f.id}`);
    expect(res.status).toBe(409);
    expect(res.json.error.code).toBe("fleet_not_empty");
    expect(res.json.error.details.servers.map((x: any) => x.id)).toEqual([s.id]);
    expect(res.json.error.details.by_state).toEqual({ provisioning: 1 });
    expect((await call("GET", `/v1/fleets/${f.id}`)).status).toBe(200);
  });

  it("deletes a fleet whose servers are all removed, tombstones, channels and roles with it, and wipes its coordinator", async () => {
    const f = await createFleet();
    await channel(f.id, "base", "base:1");
    await call("PUT", `/v1/fleets/${f.id}/roles/r`, { body: { agents: [{ name: "base" }] } });
    await call("POST", `/v1/fleets/${f.id}/fleetlock-key`);
    expect((await call("PUT", `/v1/fleets/${f.id}/reboot-groups/racks`, { body: { slots: 1 } })).status).toBe(200);
    const tomb = crypto.randomUUID();
    await env.DB.prepare(
      "INSERT INTO servers (id, fleet_id, hostname, kind, roles, reboot_group, state, status, desired_generation, created_at, updated_at) VALUES (?, ?, 'gone.example.com', 'managed', '[]', 'default', 'removed', 'unknown', 3, 1, 1)",
    )
      .bind(tomb, f.id)
      .run();
    expect((await call("DELETE", `/v1/fleets/${f.id}`, { token: null })).status).toBe(401);
    const res = await call("DELETE", `/v1/fleets/${f.id}`);
    expect(res.status).toBe(204);
    expect((await call("GET", `/v1/fleets/${f.id}`)).status).toBe(404);
    for (const table of [
      "servers",
      "agent_channels",
      "agent_channel_history",
      "role_profiles",
      "fleet_intent",
      "fleet_tasks",
    ]) {
      const n = await env.DB.prepare(`SELECT COUNT(*) AS n FROM ${table} WHERE fleet_id = ?`)
        .bind(f.id)
        .first<{ n: number }>("n");
      expect(n, table).toBe(0);
    }
    // The same id starts afresh: no old groups, no old key.
    await call("POST", "/v1/fleets", { body: { id: f.id } });
    expect((await call("GET", `/v1/fleets/${f.id}/reboot-groups`)).json.items).toEqual([]);
    expect((await call("GET", `/v1/fleets/${f.id}/channels`)).json.items).toEqual([]);
  });
});

describe("concurrent intent changes", () => {
  it("apply one after another: racing channel PUTs leave a history whose every entry names the one it replaced", async () => {
    const f = await createFleet();
    const results = await Promise.all(
      Array.from({ length: 8 }, (_, i) =>
        call("PUT", `/v1/fleets/${f.id}/channels/fw`, { body: { image: `fw:${i}`, version: `${i}` } }),
      ),
    );
    expect(results.map((r) => r.status)).toEqual(Array(8).fill(200));
    const h = (await call("GET", `/v1/fleets/${f.id}/channels/fw`)).json.history as any[];
    expect(h).toHaveLength(8);
    for (let i = 0; i < h.length - 1; i++) expect(h[i].previous.image).toBe(h[i + 1].image);
    expect(h[h.length - 1].previous).toBeNull();
  });
});
