import { createExecutionContext, env, runInDurableObject, waitOnExecutionContext } from "cloudflare:test";
import parsePrometheusTextFormat from "parse-prometheus-text-format";
import { beforeEach, describe, expect, it } from "vitest";
import { createApp } from "../src/app";
import { forgetMetricsCache } from "../src/metrics/service";
import { BASE, call, createFleet, registerServer, report } from "./helpers";
import { fleetWithKey, putGroup, registerClients, zincati } from "./fleetlock-helpers";
import { coordinator } from "./support/objects";

type Family = { name: string; type: string; metrics: { value: string; labels?: Record<string, string> }[] };

async function scrape(token?: string | null) {
  const res = await call("GET", "/metrics", { token });
  expect(res.status).toBe(200);
  expect(res.headers.get("Content-Type")).toContain("text/plain");
  return parsePrometheusTextFormat(res.json as string) as Family[];
}

const value = (families: Family[], name: string, labels: Record<string, string> = {}) => {
  const family = families.find((f) => f.name === name);
  const sample = family?.metrics.find((m) => Object.entries(labels).every(([k, v]) => m.labels?.[k] === v));
  return sample ? Number(sample.value) : undefined;
};

describe("/metrics: gauges from durable state", () => {
  beforeEach(() => forgetMetricsCache());

  it("counts servers by fleet and status, instances by agent and status, and reboot groups' slots and holders", async () => {
    const fleet = await createFleet();
    const a = await registerServer(fleet.id);
    const b = await registerServer(fleet.id);
    const agent = `m${crypto.randomUUID().slice(0, 8)}`;
    for (const s of [a, b]) {
      await call("PUT", `/v1/servers/${s.id}/desired`, {
        body: { generation: 2, agents: [{ name: agent, image: `${agent}:1`, version: "1" }] },
      });
    }
    await call("PUT", "/v1/agent/inventory", {
      token: a.token,
      body: report(2, [{ name: agent, image: `${agent}:1` }]),
    });

    const fl = await fleetWithKey();
    await putGroup(fl.fleet, "default", { slots: 3 });
    const [host] = await registerClients(fl.fleet, 1);
    expect((await zincati(fl.baseUrl, "pre-reboot", host.id)).status).toBe(200);

    const m = await scrape();
    expect(value(m, "harbormaster_servers", { fleet: fleet.id, status: "realized" })).toBe(1);
    expect(value(m, "harbormaster_servers", { fleet: fleet.id, status: "unknown" })).toBe(1);
    expect(value(m, "harbormaster_agent_instances", { agent, status: "realized" })).toBe(1);
    expect(value(m, "harbormaster_agent_instances", { agent, status: "pending" })).toBe(1);
    expect(value(m, "harbormaster_reboot_group_slots", { fleet: fl.fleet, group: "default" })).toBe(3);
    expect(value(m, "harbormaster_reboot_group_holders", { fleet: fl.fleet, group: "default" })).toBe(1);
    expect(value(m, "harbormaster_reboot_group_stuck_holders", { fleet: fl.fleet, group: "default" })).toBe(0);
    expect(value(m, "harbormaster_upgrade_steps_pending")).toBe(0);
    expect(value(m, "harbormaster_data_version")).toBe(value(m, "harbormaster_data_version_newest"));
    for (const f of m) expect(f.type, f.name).toBe("GAUGE");
    // No per-isolate counter is presented as a total any more.
    expect(m.some((f) => f.name.endsWith("_total"))).toBe(false);
  });

  it("shows each group's closed gates and each fleet's webhook deliveries still pending or given up", async () => {
    const fl = await fleetWithKey();
    await putGroup(fl.fleet, "default", { slots: 1 });
    await call("PUT", `/v1/fleets/${fl.fleet}/reboot-groups/default/hold`, { body: { reason: "freeze" } });
    const hook = await call("POST", `/v1/fleets/${fl.fleet}/webhooks`, {
      body: { url: "https://hooks.example.com/x", events: ["reboot.granted"] },
    });
    // The receiver is down.
    await runInDurableObject(coordinator(fl.fleet), (instance) => {
      (instance as unknown as { parts: { webhooks: { fetcher: unknown } } }).parts.webhooks.fetcher = async () =>
        new Response("down", { status: 502 });
    });
    const [host] = await registerClients(fl.fleet, 1);
    await call("DELETE", `/v1/fleets/${fl.fleet}/reboot-groups/default/hold`);
    expect((await zincati(fl.baseUrl, "pre-reboot", host.id)).status).toBe(200);
    await call("PUT", `/v1/fleets/${fl.fleet}/reboot-groups/default/hold`, { body: { reason: "freeze" } });
    expect(hook.status).toBe(201);
    const m = await scrape();
    expect(value(m, "harbormaster_reboot_group_gate_closed", { fleet: fl.fleet, group: "default", gate: "hold" })).toBe(
      1,
    );
    expect(value(m, "harbormaster_webhook_deliveries", { fleet: fl.fleet, status: "pending" })).toBe(1);
    expect(value(m, "harbormaster_webhook_deliveries", { fleet: fl.fleet, status: "failed" })).toBe(0);
  });

  it("needs a read token unless the deployment makes it public", async () => {
    const anonymous = await call("GET", "/metrics", { token: null });
    expect(anonymous.status).toBe(401);
    expect(anonymous.headers.get("WWW-Authenticate")).toContain("Bearer");
    const read = await call("POST", "/v1/tokens", { body: { name: "prometheus", scope: "read" } });
    await scrape(read.json.token);
    const ctx = createExecutionContext();
    const res = await createApp().request(`${BASE}/metrics`, {}, { ...env, METRICS_PUBLIC: "true" }, ctx);
    await waitOnExecutionContext(ctx);
    expect(res.status).toBe(200);
  });
});
