/**
 * Every wait says why: a fleet of its own (so the seeded one is left as it is) with groups held by
 * each reason the reboot-group page shows, hosts parked behind slots, the disruption budget and
 * the queue, and a rollout target waiting for the budget.
 */
import { accessible, admin, expect, signIn, test, url } from "./fixtures.ts";
import { reportOf, sendReport, type Host } from "./seed.ts";

const FLEET = `why-${Date.now().toString(36)}`;
const IMAGE = "registry.example/why:1";
let base = "";
const hosts: Record<string, Host> = {};
const parked: AbortController[] = [];

/** A FleetLock call as Zincati makes it; a pre-reboot that parks is left pending (aborted at the end). */
function fleetlock(op: "pre-reboot" | "steady-state", id: string, group: string) {
  const ctl = new AbortController();
  parked.push(ctl);
  return fetch(`${base}v1/${op}`, {
    method: "POST",
    headers: { "fleet-lock-protocol": "true", "content-type": "application/json" },
    body: JSON.stringify({ client_params: { id, group } }),
    signal: ctl.signal,
  }).catch(() => null);
}

async function server(name: string, group: string, zone: string) {
  const s = await admin("POST", "/v1/servers", {
    fleet: FLEET,
    hostname: `${name}.${FLEET}.test`,
    kind: "managed",
    fleetlock_id: `${name}-${FLEET}`,
    reboot_group: group,
    labels: { zone },
  });
  hosts[name] = { id: s.id, hostname: s.hostname, token: s.token, fleetlockId: `${name}-${FLEET}` };
  return hosts[name];
}

const groupUrl = (g: string) => url(`/console/groups/${g}?fleet=${FLEET}`);

test.beforeAll(async () => {
  await admin("POST", "/v1/fleets", { id: FLEET, disruption_budget: { per_label: { zone: 1 } } });
  base = (await admin("POST", `/v1/fleets/${FLEET}/fleetlock-key`)).base_url;
  await admin("PUT", `/v1/fleets/${FLEET}/reboot-groups/busy`, { slots: 1, queue_wait_s: 600 });
  await admin("PUT", `/v1/fleets/${FLEET}/reboot-groups/paused`, { slots: 1, paused: true });
  await admin("PUT", `/v1/fleets/${FLEET}/reboot-groups/held`, { slots: 1 });
  await admin("PUT", `/v1/fleets/${FLEET}/reboot-groups/held/hold`, { reason: "change freeze for the audit" });
  const day = ["Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"][(new Date().getUTCDay() + 3) % 7];
  await admin("PUT", `/v1/fleets/${FLEET}/reboot-groups/nightly`, {
    slots: 1,
    windows: [{ days: [day], start_time: "02:00", length_minutes: 60, time_zone: "UTC" }],
  });
  await admin("PUT", `/v1/fleets/${FLEET}/reboot-groups/gated`, { slots: 1, gates: { max_rebooted_unhealthy: 0 } });
  await admin("PUT", `/v1/fleets/${FLEET}/reboot-groups/canary`, {
    slots: 1,
    release_on: "healthy_report",
    health_timeout_s: 30,
  });
  // busy: a1 holds the slot; a2 (a1's zone) and b1 park behind it.
  await server("a1", "busy", "a");
  await server("a2", "busy", "a");
  await server("b1", "busy", "b");
  await server("c1", "canary", "c");
  expect((await fleetlock("pre-reboot", hosts.a1.fleetlockId, "busy"))?.status).toBe(200);
  void fleetlock("pre-reboot", hosts.a2.fleetlockId, "busy");
  await expect.poll(async () => (await admin("GET", `/v1/fleets/${FLEET}/reboot-groups/busy`)).queue.length).toBe(1);
  void fleetlock("pre-reboot", hosts.b1.fleetlockId, "busy");
  await expect.poll(async () => (await admin("GET", `/v1/fleets/${FLEET}/reboot-groups/busy`)).queue.length).toBe(2);
  // canary: c1 reboots and never reports healthy; gated counts it as rebooted and not healthy.
  expect((await fleetlock("pre-reboot", hosts.c1.fleetlockId, "canary"))?.status).toBe(200);
  expect((await fleetlock("steady-state", hosts.c1.fleetlockId, "canary"))?.status).toBe(200);
});

test.afterAll(() => {
  for (const c of parked) c.abort();
});

test("a reboot group's page says why each parked host waits: its slots, the disruption budget, the queue", async ({
  page,
}) => {
  await signIn(page, undefined, `/console/groups/busy?fleet=${FLEET}`);
  const a2 = page.getByRole("list", { name: `Why ${hosts.a2.hostname} waits` });
  await expect(a2).toContainText("Slots taken:");
  await expect(a2).toContainText(hosts.a1.hostname);
  await expect(a2).toContainText("Disruption budget:");
  await expect(a2).toContainText("zone=a");
  const b1 = page.getByRole("list", { name: `Why ${hosts.b1.hostname} waits` });
  await expect(b1).toContainText("Queue:");
  await expect(b1).toContainText(hosts.a2.hostname);
  await expect(b1).not.toContainText("Disruption budget");
  await accessible(page);
});

test("a group held, paused, outside its window or behind a failing gate says so, with since and until", async ({
  page,
}) => {
  await signIn(page, undefined, `/console/groups/held?fleet=${FLEET}`);
  const why = page.getByRole("list", { name: "Why the group admits no one" });
  await expect(why).toContainText("Hold:");
  await expect(why).toContainText("change freeze for the audit");
  await page.goto(groupUrl("paused"));
  await expect(why).toContainText("Paused: paused by an operator");
  await page.goto(groupUrl("nightly"));
  await expect(why).toContainText("Window closed: no maintenance window is open until");
  await expect(why).toContainText("until");
  await page.goto(groupUrl("gated"));
  await expect(why).toContainText("Gate failing:");
  await expect(why).toContainText("rebooted_unhealthy");
  await accessible(page);
});

test("a group that paused itself because a host did not report healthy after its reboot says so, naming it", async ({
  page,
}) => {
  test.setTimeout(90_000);
  await signIn(page, undefined, `/console/groups/canary?fleet=${FLEET}`);
  // The group's health time-out is 30 s: past it, the coordinator pauses the group by itself.
  await expect
    .poll(async () => (await admin("GET", `/v1/fleets/${FLEET}/reboot-groups/canary`)).paused, { timeout: 60_000 })
    .toBe(true);
  await page.goto(groupUrl("canary"));
  const why = page.getByRole("list", { name: "Why the group admits no one" });
  await expect(why).toContainText("Paused by itself:");
  await expect(why).toContainText(`${hosts.c1.hostname} did not report healthy within 30 s of its reboot`);
  await expect(page.locator("h1")).toContainText("paused");
  await accessible(page);
});

test("a rollout target waiting for the disruption budget shows who holds it", async ({ page }) => {
  // a3 runs the agent; a1 (its zone) holds a reboot slot, so a3's target waits.
  const a3 = await server("a3", "other", "a");
  const d = await admin("PUT", `/v1/servers/${a3.id}/desired`, {
    generation: 2,
    agents: [{ name: "why", image: IMAGE, version: "1" }],
  });
  await sendReport(url(""), a3, reportOf(d.generation, [{ name: "why", image: IMAGE }]));
  const r = await admin("POST", "/v1/rollouts", {
    fleet: FLEET,
    agent: "why",
    image: "registry.example/why:2",
    version: "2",
    selector: { servers: [a3.id] },
  });
  await expect
    .poll(async () => (await admin("GET", `/v1/rollouts/${r.id}/targets`)).items[0].state, { timeout: 10_000 })
    .toBe("waiting_budget");
  await signIn(page, undefined, `/console/rollouts/${r.id}`);
  const why = page.getByRole("list", { name: `Why ${a3.hostname} waits` });
  await expect(why).toContainText("Disruption budget:");
  await expect(why).toContainText(hosts.a1.hostname);
  await accessible(page);
});
