import { describe, expect, it } from "vitest";
import { call, fireTimersNow, settle } from "./helpers";
import { fleetWithKey, getGroup, putGroup, zincati } from "./fleetlock-helpers";
import {
  drain,
  getRollout,
  hostReconcile,
  reconcileApplying,
  rolloutStub,
  startRollout,
  targets,
} from "./rollout-helpers";

describe("disruptive updates take reboot slots", () => {
  it("a reboot_slot rollout and Zincati clients sharing a 2-slot group never exceed 2 holders", async () => {
    const f = await fleetWithKey();
    await putGroup(f.fleet, "default", { slots: 2 });
    // Five servers run the agent; two more are plain Zincati hosts of the same group.
    const { hosts } = await fleetWithAgentIn(f.fleet, 5);
    const zincatiIds = ["zc-a", "zc-b"];
    for (const id of zincatiIds) {
      const s = await call("POST", "/v1/servers", {
        body: { fleet: f.fleet, hostname: `${id}.example.com`, kind: "managed", fleetlock_id: id },
      });
      expect(s.status).toBe(201);
    }
    expect((await zincati(f.baseUrl, "pre-reboot", "zc-a")).status).toBe(200);

    const r = await startRollout({ fleet: f.fleet, concurrency: 5, reboot_slot: true });
    let g = await getGroup(f.fleet, "default");
    expect(g.holders.length).toBe(2);
    const rolloutHolders = g.holders.filter((h) => h.id.startsWith(`rollout:${r.id}:`));
    expect(rolloutHolders).toHaveLength(1);
    // Operators see the rollout in the holder id, and the server it belongs to.
    expect(hosts.map((h) => h.id)).toContain(rolloutHolders[0].server!.id);
    expect((await getRollout(r.id)).counts).toMatchObject({ applying: 1, queued: 4 });
    // The other Zincati host finds the group full.
    expect((await zincati(f.baseUrl, "pre-reboot", "zc-b")).json.kind).toBe("semaphore_full");

    let max = 0;
    for (let i = 0; i < 20 && (await getRollout(r.id)).state === "running"; i++) {
      await reconcileApplying(r.id, hosts);
      // Zincati hosts race for whatever the rollout released.
      await Promise.all(zincatiIds.map((id) => zincati(f.baseUrl, "pre-reboot", id)));
      g = await getGroup(f.fleet, "default");
      max = Math.max(max, g.holders.length);
      if (i % 2 === 1) await zincati(f.baseUrl, "steady-state", zincatiIds[i % 4 === 1 ? 0 : 1]);
      // Refused slot requests are retried from the rollout's timer.
      await fireTimersNow(rolloutStub(r.id));
      await drain(r.id);
      g = await getGroup(f.fleet, "default");
      max = Math.max(max, g.holders.length);
    }
    expect(max).toBe(2);
    const final = await getRollout(r.id);
    expect(final.state).toBe("succeeded");
    expect(final.counts.done).toBe(5);
    // Every slot the rollout took is given back.
    g = await getGroup(f.fleet, "default");
    expect(g.holders.filter((h) => h.id.startsWith("rollout:"))).toHaveLength(0);
  });

  it("hosts parked in the group's FIFO queue go before the rollout: a slot the rollout releases goes to them", async () => {
    const f = await fleetWithKey();
    await putGroup(f.fleet, "default", { slots: 1, queue_wait_s: 30 });
    const { hosts } = await fleetWithAgentIn(f.fleet, 2);
    const zc = await call("POST", "/v1/servers", {
      body: { fleet: f.fleet, hostname: "zq.example.com", kind: "managed", fleetlock_id: "zq" },
    });
    expect(zc.status).toBe(201);
    const r = await startRollout({ fleet: f.fleet, concurrency: 1, reboot_slot: true });
    const [first] = await targets(r.id, "?state=applying");
    expect((await getGroup(f.fleet, "default")).holders.map((h) => h.id)).toEqual([
      `rollout:${r.id}:${first.server_id}`,
    ]);
    // Zincati parks in the queue while the rollout holds the only slot.
    const parked = zincati(f.baseUrl, "pre-reboot", "zq");
    for (let i = 0; i < 100 && !((await getGroup(f.fleet, "default")) as any).queue?.length; i++)
      await new Promise((res) => setTimeout(res, 20));
    await reconcileApplying(r.id, hosts);
    // The target is done; its slot went to the parked host, not to the rollout's next target.
    expect((await parked).status).toBe(200);
    let g = await getGroup(f.fleet, "default");
    expect(g.holders.map((h) => h.id)).toEqual(["zq"]);
    expect((await getRollout(r.id)).counts).toMatchObject({ done: 1, applying: 0, queued: 1 });
    // Once Zincati is back, the rollout's retry takes the slot.
    await zincati(f.baseUrl, "steady-state", "zq");
    await fireTimersNow(rolloutStub(r.id));
    await drain(r.id);
    g = await getGroup(f.fleet, "default");
    expect(g.holders.map((h) => h.id)).toEqual([expect.stringMatching(new RegExp(`^rollout:${r.id}:`))]);
    await reconcileApplying(r.id, hosts);
    expect(await getRollout(r.id)).toMatchObject({ state: "succeeded", counts: { done: 2 } });
  });

  it("a target whose server's group is not configured fails with the reason", async () => {
    const f = await fleetWithKey();
    const { hosts } = await fleetWithAgentIn(f.fleet, 1);
    const r = await startRollout({ fleet: f.fleet, reboot_slot: true });
    const [t] = await targets(r.id);
    expect(t).toMatchObject({ server_id: hosts[0].id, state: "failed" });
    expect(t.reason).toMatch(/not configured/);
  });
});

/** fleetWithAgent for a fleet that already exists (with a FleetLock key). */
async function fleetWithAgentIn(fleet: string, n: number) {
  const hosts = [];
  for (let i = 0; i < n; i++) {
    const hostname = `slot-${i}-${Math.random().toString(36).slice(2, 7)}.example.com`;
    const s = await call("POST", "/v1/servers", {
      body: { fleet, hostname, kind: "managed", fleetlock_id: `rs-${i}-${Math.random().toString(36).slice(2, 7)}` },
    });
    await call("PUT", `/v1/servers/${s.json.id}/desired`, {
      body: { generation: 2, agents: [{ name: "fw-agent", image: "registry.example/fw:1.0.0", version: "1.0.0" }] },
    });
    const h = { id: s.json.id, token: s.json.token, hostname };
    await hostReconcile(h);
    await settle(h.id);
    hosts.push(h);
  }
  return { hosts };
}
