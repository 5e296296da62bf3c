/**
 * Release on a healthy report (docs/reboot-safety.md): under `release_on: healthy_report` a host's steady
 * state is answered 200 but its slot is freed only by its server's report from the new boot with
 * every agent realized; past health_timeout_s the server is unhealthy after its reboot, its slot
 * stays taken and the group pauses itself. And the gate on servers rebooted and not yet healthy.
 */
import { describe, expect, it } from "vitest";
import { call, fireTimersNow, report } from "./helpers";
import {
  fleetWithKey,
  flushCoordinator,
  parkInOrder,
  putGroup,
  registerClients,
  setClockOffset,
  view,
  zincati,
} from "./fleetlock-helpers";
import { coordinator } from "./support/objects";

const healthy = (boot: string) => report(1, [], { boot_id: boot });
const broken = (boot: string) => ({
  ...report(1, [], { boot_id: boot }),
  errors: [{ agent: "compute", op: "start", message: "crash loop" }],
});
const inventory = (token: string, body: unknown) => call("PUT", "/v1/agent/inventory", { token, body });

async function fleetWithHealthRule(extra: Record<string, unknown> = {}) {
  const f = await fleetWithKey();
  await putGroup(f.fleet, "default", {
    slots: 1,
    queue_wait_s: 30,
    release_on: "healthy_report",
    health_timeout_s: 600,
    ...extra,
  });
  const hosts = await registerClients(f.fleet, 3);
  for (const h of hosts) expect((await inventory(h.token, healthy(`${h.id}-boot-1`))).status).toBe(200);
  return { f, hosts };
}

describe("release on a healthy report", () => {
  it("keeps the slot past steady state, through reports from the old boot and a failing new boot, and frees it on a realized report from the new boot", async () => {
    const {
      f,
      hosts: [a, b],
    } = await fleetWithHealthRule();
    expect((await zincati(f.baseUrl, "pre-reboot", a.id)).status).toBe(200);
    const [pb] = await parkInOrder(f, [b.id]);

    // Back up: Zincati's steady state is answered as it expects, but the slot stays taken.
    const steady = await zincati(f.baseUrl, "steady-state", a.id);
    expect(steady.status).toBe(200);
    expect(steady.json).toEqual({ released: false });
    let g = await view(f.fleet);
    expect(g.holders).toMatchObject([{ id: a.id, rebooted_at: expect.any(String), unhealthy_after_reboot: false }]);

    // The old boot, realized: not the new boot. The new boot, failing: not healthy.
    await inventory(a.token, {
      ...healthy(`${a.id}-boot-1`),
      reconciled_at: new Date(Date.now() + 1000).toISOString(),
    });
    await inventory(a.token, broken(`${a.id}-boot-2`));
    g = await view(f.fleet);
    expect(g.holders.map((h) => h.id)).toEqual([a.id]);
    expect(g.queue.map((q) => q.id)).toEqual([b.id]);

    // The new boot, every agent realized: the slot is free and goes to b at once.
    await inventory(a.token, healthy(`${a.id}-boot-2`));
    expect((await pb).status).toBe(200);
    expect((await view(f.fleet)).holders.map((h) => h.id)).toEqual([b.id]);
    await flushCoordinator(f.fleet);
    const audit = await call("GET", `/v1/audit?target=fleet:${f.fleet}&limit=100`);
    expect(audit.json.items.some((e: { action: string }) => e.action === "fleetlock.release_healthy")).toBe(true);
  });

  it("frees the slot when the healthy report from the new boot comes before the host's steady-state call", async () => {
    const {
      f,
      hosts: [a],
    } = await fleetWithHealthRule();
    expect((await zincati(f.baseUrl, "pre-reboot", a.id)).status).toBe(200);
    await inventory(a.token, healthy(`${a.id}-boot-2`));
    expect((await view(f.fleet)).holders).toEqual([]);
    expect((await zincati(f.baseUrl, "steady-state", a.id)).json).toEqual({ released: false });
  });

  it("marks a server unhealthy after its reboot at the time-out: its slot stays taken and the group pauses itself, saying why", async () => {
    const {
      f,
      hosts: [a, b],
    } = await fleetWithHealthRule();
    expect((await zincati(f.baseUrl, "pre-reboot", a.id)).status).toBe(200);
    await zincati(f.baseUrl, "steady-state", a.id);
    await inventory(a.token, broken(`${a.id}-boot-2`));
    // Not before the time-out…
    await setClockOffset(f.fleet, 590_000);
    await fireTimersNow(coordinator(f.fleet));
    expect((await view(f.fleet)).paused).toBe(false);
    // …and at it.
    await setClockOffset(f.fleet, 601_000);
    await fireTimersNow(coordinator(f.fleet));
    const g = await view(f.fleet);
    expect(g.holders).toMatchObject([{ id: a.id, unhealthy_after_reboot: true }]);
    expect(g.paused).toBe(true);
    expect(g.paused_reason).toMatch(/did not report healthy within 600 s/);
    const refused = await zincati(f.baseUrl, "pre-reboot", b.id);
    expect(refused.status).toBe(409);
    expect(refused.json).toMatchObject({
      kind: "group_paused",
      value: expect.stringMatching(/did not report healthy/),
    });
    await flushCoordinator(f.fleet);
    const audit = await call("GET", `/v1/audit?target=fleet:${f.fleet}&limit=100`);
    expect(audit.json.items.some((e: { action: string }) => e.action === "fleetlock.unhealthy_after_reboot")).toBe(
      true,
    );

    // Healthy at last: its slot is freed, and the group stays paused until an operator resumes it.
    await inventory(a.token, healthy(`${a.id}-boot-2`));
    const after = await view(f.fleet);
    expect(after.holders).toEqual([]);
    expect(after.paused).toBe(true);
    await putGroup(f.fleet, "default", { slots: 1, paused: false });
    expect((await view(f.fleet)).paused_reason).toBeNull();
    expect((await zincati(f.baseUrl, "pre-reboot", b.id)).status).toBe(200);
  });

  it("does not pause the group when told not to, but still keeps the slot", async () => {
    const {
      f,
      hosts: [a],
    } = await fleetWithHealthRule({ pause_on_unhealthy: false });
    await zincati(f.baseUrl, "pre-reboot", a.id);
    await zincati(f.baseUrl, "steady-state", a.id);
    await setClockOffset(f.fleet, 601_000);
    await fireTimersNow(coordinator(f.fleet));
    const g = await view(f.fleet);
    expect(g.paused).toBe(false);
    expect(g.holders).toMatchObject([{ id: a.id, unhealthy_after_reboot: true }]);
  });

  it("steady_state groups free the slot on steady state as before", async () => {
    const f = await fleetWithKey();
    await putGroup(f.fleet, "default", { slots: 1 });
    const [a] = await registerClients(f.fleet, 1);
    await zincati(f.baseUrl, "pre-reboot", a.id);
    expect((await zincati(f.baseUrl, "steady-state", a.id)).json).toEqual({ released: true });
    expect((await view(f.fleet)).release_on).toBe("steady_state");
  });
});

describe("the gate on servers rebooted and not yet healthy", () => {
  it("holds the next grant while more servers than allowed rebooted without a healthy report, and grants it once one reports healthy", async () => {
    const f = await fleetWithKey();
    await putGroup(f.fleet, "default", { slots: 2, queue_wait_s: 30, gates: { max_rebooted_unhealthy: 0 } });
    const [a, b] = await registerClients(f.fleet, 2);
    await inventory(a.token, healthy(`${a.id}-boot-1`));
    expect((await zincati(f.baseUrl, "pre-reboot", a.id)).status).toBe(200);
    expect((await zincati(f.baseUrl, "steady-state", a.id)).json).toEqual({ released: true });
    const [pb] = await parkInOrder(f, [b.id]);
    const g = await view(f.fleet);
    expect(g.holders).toEqual([]);
    expect(g.gates).toMatchObject([{ gate: "rebooted_unhealthy", open: false, kind: "reboots_unhealthy" }]);
    await inventory(a.token, healthy(`${a.id}-boot-2`));
    expect((await pb).status).toBe(200);
  });
});
