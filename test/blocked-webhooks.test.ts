import { describe, expect, it } from "vitest";
import { call, fireTimersNow, settle } from "./helpers";
import { fleetWithKey, flushCoordinator, putGroup, setClockOffset, until, zincati } from "./fleetlock-helpers";
import { drain, hostReconcile, startRollout } from "./rollout-helpers";
import { coordinator } from "./support/objects";
import { bodiesOf, hook, receiver } from "./webhook-helpers";

type Blocked = { kind: string; servers?: string[]; detail?: string; until?: string; by?: string };

async function host(fleet: string, name: string, group: string, zone: string, agent = false) {
  const hostname = `${name}.${fleet}.test`;
  const s = await call("POST", "/v1/servers", {
    body: { fleet, hostname, kind: "managed", fleetlock_id: `${name}-${fleet}`, reboot_group: group, labels: { zone } },
  });
  if (s.status !== 201) throw new Error(`register: ${s.status} ${JSON.stringify(s.json)}`);
  const h = { id: s.json.id, token: s.json.token, hostname, fleetlockId: `${name}-${fleet}` };
  if (agent) {
    await call("PUT", `/v1/servers/${h.id}/desired`, {
      body: { generation: 2, agents: [{ name: "fw-agent", image: "registry.example/fw:1.0.0", version: "1.0.0" }] },
    });
    await hostReconcile(h);
  }
  await settle(h.id);
  return h;
}

describe("webhook events say why something waits (blocked_by)", () => {
  it("reboot.queued, rollout.target_waiting, reboot.gate_closed and reboot.unhealthy_after_reboot carry every kind", async () => {
    const f = await fleetWithKey();
    await call("PATCH", `/v1/fleets/${f.fleet}`, { body: { disruption_budget: { per_label: { zone: 1 } } } });
    const url = await hook(f.fleet, "why", [
      "reboot.queued",
      "rollout.target_waiting",
      "reboot.gate_closed",
      "reboot.unhealthy_after_reboot",
    ]);
    const sent = await receiver(f.fleet);
    const day = ["Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"][(new Date().getUTCDay() + 3) % 7];
    await putGroup(f.fleet, "busy", { slots: 1, queue_wait_s: 60 });
    await putGroup(f.fleet, "nightly", {
      slots: 1,
      queue_wait_s: 60,
      windows: [{ days: [day], start_time: "02:00", length_minutes: 60, time_zone: "UTC" }],
    });
    await putGroup(f.fleet, "canary", { slots: 1, release_on: "healthy_report", health_timeout_s: 30 });
    const a1 = await host(f.fleet, "a1", "busy", "a");
    const a2 = await host(f.fleet, "a2", "busy", "a");
    const b1 = await host(f.fleet, "b1", "busy", "b");
    const n1 = await host(f.fleet, "n1", "nightly", "n");
    const a3 = await host(f.fleet, "a3", "other", "a", true);
    const c1 = await host(f.fleet, "c1", "canary", "c");

    // slots + budget (a2, a1's zone), then slots + queue (b1), then a closed window (n1).
    expect((await zincati(f.baseUrl, "pre-reboot", a1.fleetlockId, "busy")).status).toBe(200);
    void zincati(f.baseUrl, "pre-reboot", a2.fleetlockId, "busy");
    await until(f.fleet, (g) => g.queue.length === 1, 5000, "busy");
    void zincati(f.baseUrl, "pre-reboot", b1.fleetlockId, "busy");
    await until(f.fleet, (g) => g.queue.length === 2, 5000, "busy");
    void zincati(f.baseUrl, "pre-reboot", n1.fleetlockId, "nightly");
    await until(f.fleet, (g) => g.queue.length === 1, 5000, "nightly");
    // A rollout target of zone a waits for the budget a1 holds.
    const r = await startRollout({ fleet: f.fleet, concurrency: 1, selector: { servers: [a3.id] } });
    await drain(r.id);
    // A hold on busy: its gate closes.
    expect(
      (await call("PUT", `/v1/fleets/${f.fleet}/reboot-groups/busy/hold`, { body: { reason: "freeze" } })).status,
    ).toBe(200);
    // c1 reboots and never reports healthy: 31 s later the canary group pauses itself.
    expect((await zincati(f.baseUrl, "pre-reboot", c1.fleetlockId, "canary")).status).toBe(200);
    expect((await zincati(f.baseUrl, "steady-state", c1.fleetlockId, "canary")).status).toBe(200);
    await setClockOffset(f.fleet, 31_000);
    await fireTimersNow(coordinator(f.fleet));
    await flushCoordinator(f.fleet);
    await fireTimersNow(coordinator(f.fleet));

    const bodies = bodiesOf(sent, url) as { type: string; data: { hostname?: string; blocked_by: Blocked[] } }[];
    const kindsOf = (type: string, hostname?: string) =>
      bodies
        .filter((b) => b.type === `dev.harbormaster.${type}` && (!hostname || b.data.hostname === hostname))
        .flatMap((b) => b.data.blocked_by.map((x) => x.kind));
    expect(kindsOf("reboot.queued", a2.hostname)).toEqual(["slots", "budget"]);
    expect(bodies.find((b) => b.data.hostname === a2.hostname)!.data.blocked_by[1]).toMatchObject({
      servers: [a1.hostname],
      detail: "zone=a",
    });
    expect(kindsOf("reboot.queued", b1.hostname)).toEqual(["slots", "queue"]);
    expect(kindsOf("reboot.queued", n1.hostname)).toEqual(["window"]);
    expect(bodies.find((b) => b.data.hostname === n1.hostname)!.data.blocked_by[0].until).toMatch(/T02:00:00/);
    expect(kindsOf("rollout.target_waiting", a3.hostname)).toEqual(["budget"]);
    expect(kindsOf("reboot.gate_closed")).toContain("hold");
    expect(kindsOf("reboot.unhealthy_after_reboot")).toEqual(["auto_paused"]);
    expect(
      bodies.find((b) => b.type === "dev.harbormaster.reboot.unhealthy_after_reboot")!.data.blocked_by[0].servers,
    ).toEqual([c1.hostname]);
  });
});
