/**
 * The waits that used to park inside an object — a FleetLock pre-reboot in its group's queue, an
 * operator's rollout long poll — are held in the Worker on hibernatable waiter sockets: the
 * object sleeps while they wait, and wakes them when the answer is decided, across an eviction too.
 */
import { evictDurableObject, runInDurableObject } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import { meterReading } from "../src/local/meter";
import { call } from "./helpers";
import { fleetWithKey, park, putGroup, registerClients, until, view, zincati } from "./fleetlock-helpers";
import { fleetWithAgent, getRollout, reconcileApplying, rolloutStub, startRollout } from "./rollout-helpers";
import { coordinator, sleep } from "./support/objects";

type Reading = { in_flight: number; waiting_until: number; awake_ms: number };

const waitersIn = (stub: DurableObjectStub) =>
  runInDurableObject(stub, (_i, state) => state.getWebSockets("waiter").length);

const readingOf = (className: string, stub: DurableObjectStub) =>
  (meterReading().objects[className] as { by_instance: Record<string, Reading> }).by_instance[stub.id.toString()];

/**
 * The object holds no call and no background work while the wait goes on, and is not awake:
 * its awake time does not grow over a second of waiting.
 */
async function expectAsleep(className: string, stub: DurableObjectStub) {
  // Background work started before the wait (a host audit row's batch delay) ends first.
  for (let i = 0; readingOf(className, stub).waiting_until > 0; i++) {
    if (i > 100) throw new Error("background work never ended");
    await sleep(50);
  }
  await sleep(100);
  const during = readingOf(className, stub);
  expect(during).toMatchObject({ in_flight: 0, waiting_until: 0 });
  await sleep(1_000);
  const later = readingOf(className, stub);
  expect(later.awake_ms - during.awake_ms).toBeLessThan(100);
  expect(later.in_flight + later.waiting_until).toBe(0);
}

describe("a pre-reboot parked in the FleetLock queue waits in the Worker", () => {
  it("leaves the RebootCoordinator with no call in flight, no background work, and asleep; the freed slot still answers it 200 at once", async () => {
    const f = await fleetWithKey();
    await putGroup(f.fleet, "default", { slots: 1, queue_wait_s: 60 });
    const [a, b] = await registerClients(f.fleet, 2);
    expect((await zincati(f.baseUrl, "pre-reboot", a.id)).status).toBe(200);
    const pb = park(f.baseUrl, b.id);
    await until(f.fleet, (g) => g.queue.some((q) => q.id === b.id && q.connected));
    expect(await waitersIn(coordinator(f.fleet))).toBe(1);
    await expectAsleep("RebootCoordinator", coordinator(f.fleet));

    const started = Date.now();
    await zincati(f.baseUrl, "steady-state", a.id);
    expect((await pb).status).toBe(200);
    expect(Date.now() - started).toBeLessThan(3_000);
    expect((await view(f.fleet)).holders.map((h) => h.id)).toEqual([b.id]);
  });

  it("is granted across an eviction of the coordinator between park and grant: the woken Worker answers 200, and the host shows connected meanwhile", async () => {
    const f = await fleetWithKey();
    await putGroup(f.fleet, "default", { slots: 1, queue_wait_s: 60 });
    const [a, b, c] = await registerClients(f.fleet, 3);
    await zincati(f.baseUrl, "pre-reboot", a.id);
    const pb = park(f.baseUrl, b.id);
    await until(f.fleet, (g) => g.queue.some((q) => q.id === b.id));
    // Eviction tears the instance down; the waiter hibernates and the queue entry is durable.
    await evictDurableObject(coordinator(f.fleet));
    // Told by the waiter sockets, not by memory: still connected after the eviction.
    expect((await view(f.fleet)).queue.map((q) => [q.id, q.connected])).toEqual([[b.id, true]]);
    const pc = park(f.baseUrl, c.id);
    await until(f.fleet, (g) => g.queue.length === 2);
    await evictDurableObject(coordinator(f.fleet));

    await zincati(f.baseUrl, "steady-state", a.id);
    const res = await pb;
    expect(res.status).toBe(200);
    expect(res.json).toEqual({ granted: true });
    expect((await view(f.fleet)).holders.map((h) => [h.id, h.unclaimed_until])).toEqual([[b.id, null]]);
    // A second pre-reboot of the holder is 200 at once (recursive lock); c still waits, first in line.
    expect((await zincati(f.baseUrl, "pre-reboot", b.id)).status).toBe(200);
    expect((await view(f.fleet)).queue.map((q) => q.id)).toEqual([c.id]);
    await zincati(f.baseUrl, "steady-state", b.id);
    expect((await pc).status).toBe(200);
    expect(await waitersIn(coordinator(f.fleet))).toBe(0);
  });

  it("ends in the group's refusal at queue_wait_s with the coordinator evicted meanwhile: no timer in the object is needed", async () => {
    const f = await fleetWithKey();
    await putGroup(f.fleet, "default", { slots: 1, queue_wait_s: 2 });
    const [a, b] = await registerClients(f.fleet, 2);
    await zincati(f.baseUrl, "pre-reboot", a.id);
    const started = Date.now();
    const pb = park(f.baseUrl, b.id);
    await until(f.fleet, (g) => g.queue.some((q) => q.id === b.id));
    await evictDurableObject(coordinator(f.fleet));
    const res = await pb;
    expect(Date.now() - started).toBeGreaterThanOrEqual(1_900);
    expect(Date.now() - started).toBeLessThan(6_000);
    expect(res.status).toBe(409);
    expect(res.json.kind).toBe("semaphore_full");
    expect(res.json.value).toContain("waited 2 s in the queue");
    expect((await view(f.fleet)).queue).toEqual([]);
  });
});

describe("a rollout's long poll waits in the Worker", () => {
  it("leaves the Rollout object with no call in flight, no background work, and asleep; evicted meanwhile, it still wakes the poll with the change", async () => {
    const { fleet, hosts } = await fleetWithAgent(2);
    const r = await startRollout({ fleet, concurrency: 1 });
    const first = await getRollout(r.id);
    const polled = call("GET", `/v1/rollouts/${r.id}?wait=30&since=${first.change}`);
    const stub = rolloutStub(r.id);
    for (let i = 0; (await waitersIn(stub)) !== 1; i++) {
      if (i > 100) throw new Error("the poll never waited");
      await sleep(50);
    }
    await expectAsleep("Rollout", stub);
    await evictDurableObject(stub);

    const started = Date.now();
    await reconcileApplying(r.id, hosts);
    const res = await polled;
    expect(res.status).toBe(200);
    expect(res.json.change).toBeGreaterThan(first.change);
    expect(Date.now() - started).toBeLessThan(5_000);
    expect(await waitersIn(stub)).toBe(0);
  });
});
