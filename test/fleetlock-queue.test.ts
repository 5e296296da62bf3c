import { runDurableObjectAlarm, runInDurableObject, SELF } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import { MAX_QUEUE_WAIT_S, UNCLAIMED_GRANT_S } from "../src/fleetlock/queue";
import { preRebootWaitRequest } from "../src/fleetlock/waits";
import { sha256Hex } from "../src/lib/crypto";
import { call } from "./helpers";
import {
  fleetWithKey,
  park,
  parkInOrder,
  type Queued,
  putGroup,
  registerClients,
  resetCoordinator,
  setClockOffset,
  storedQueue,
  until,
  view,
  zincati,
  type Op,
} from "./fleetlock-helpers";
import { coordinator, sleep } from "./support/objects";

describe("fair reboot queue", () => {
  it("refuses at once with queue_wait_s 0 (the default), and validates queue_wait_s", async () => {
    const f = await fleetWithKey();
    const g = await putGroup(f.fleet, "default", { slots: 1 });
    expect(g.queue_wait_s).toBe(0);
    const [a, b] = await registerClients(f.fleet, 2);
    expect((await zincati(f.baseUrl, "pre-reboot", a.id)).status).toBe(200);
    const t = Date.now();
    expect((await zincati(f.baseUrl, "pre-reboot", b.id)).json.kind).toBe("semaphore_full");
    expect(Date.now() - t).toBeLessThan(1000);
    for (const bad of [-1, MAX_QUEUE_WAIT_S + 1, 1.5, "10"]) {
      const res = await call("PUT", `/v1/fleets/${f.fleet}/reboot-groups/default`, {
        body: { slots: 1, queue_wait_s: bad },
      });
      expect(res.status, String(bad)).toBe(400);
    }
    expect((await view(f.fleet)).queue_wait_s).toBe(0);
    // Up to just under Zincati's 30-minute request time-out.
    expect(MAX_QUEUE_WAIT_S).toBe(1740);
    expect((await putGroup(f.fleet, "default", { slots: 1, queue_wait_s: MAX_QUEUE_WAIT_S })).queue_wait_s).toBe(
      MAX_QUEUE_WAIT_S,
    );
  });

  it("grants freed slots to parked hosts in FIFO order, each answered 200 the moment its slot frees", async () => {
    const f = await fleetWithKey();
    await putGroup(f.fleet, "default", { slots: 1, queue_wait_s: 20 });
    const [a, b, c, d] = await registerClients(f.fleet, 4);
    expect((await zincati(f.baseUrl, "pre-reboot", a.id)).status).toBe(200);
    const log: string[] = [];
    const [pb, pc, pd] = await parkInOrder(f, [b.id, c.id, d.id], log);
    const g = await view(f.fleet);
    expect(g.queue.map((q) => [q.position, q.id, q.connected])).toEqual([
      [1, b.id, true],
      [2, c.id, true],
      [3, d.id, true],
    ]);
    expect(g.queue[0].server?.id).toBe(b.serverId);
    expect(log).toEqual([]);

    await zincati(f.baseUrl, "steady-state", a.id);
    expect((await pb).status).toBe(200);
    expect((await view(f.fleet)).holders.map((h) => h.id)).toEqual([b.id]);
    await zincati(f.baseUrl, "steady-state", b.id);
    expect((await pc).status).toBe(200);
    await zincati(f.baseUrl, "steady-state", c.id);
    expect((await pd).status).toBe(200);
    expect(log).toEqual([b.id, c.id, d.id]);
    const end = await view(f.fleet);
    expect(end.holders.map((h) => h.id)).toEqual([d.id]);
    expect(end.queue).toEqual([]);
  });

  it("does not let a newcomer take a slot ahead of parked hosts, and holds one place per id", async () => {
    const f = await fleetWithKey();
    await putGroup(f.fleet, "default", { slots: 1, queue_wait_s: 20 });
    const [a, b, c] = await registerClients(f.fleet, 3);
    await zincati(f.baseUrl, "pre-reboot", a.id);
    const [pb] = await parkInOrder(f, [b.id]);
    // The same id parking a second time waits on the same place.
    const pb2 = park(f.baseUrl, b.id);
    const [pc] = await parkInOrder(f, [c.id]);
    const g = await view(f.fleet);
    expect(g.queue.map((q) => q.id)).toEqual([b.id, c.id]);
    await zincati(f.baseUrl, "steady-state", a.id);
    expect((await pb).status).toBe(200);
    expect((await pb2).status).toBe(200);
    const after = await view(f.fleet);
    expect(after.holders.map((h) => h.id)).toEqual([b.id]);
    expect(after.queue.map((q) => q.id)).toEqual([c.id]);
    await zincati(f.baseUrl, "steady-state", b.id);
    expect((await pc).status).toBe(200);
  });

  it("answers a parked host with the refusal once its wait runs out, and it leaves the queue", async () => {
    const f = await fleetWithKey();
    await putGroup(f.fleet, "default", { slots: 1, queue_wait_s: 1 });
    const [a, b] = await registerClients(f.fleet, 2);
    await zincati(f.baseUrl, "pre-reboot", a.id);
    const t = Date.now();
    const res = await zincati(f.baseUrl, "pre-reboot", b.id);
    expect(Date.now() - t).toBeGreaterThanOrEqual(900);
    expect(res.status).toBe(409);
    expect(res.json.kind).toBe("semaphore_full");
    const g = await view(f.fleet);
    expect(g.queue).toEqual([]);
    expect(g.holders.map((h) => h.id)).toEqual([a.id]);
    expect(await storedQueue(f.fleet)).toEqual([]);
    // Parking again after the wait ran out stores the new place, which survives a restart.
    await putGroup(f.fleet, "default", { slots: 1, queue_wait_s: 20 });
    const [pb] = await parkInOrder(f, [b.id]);
    await resetCoordinator(f.fleet);
    const again = await until(f.fleet, (v) => v.queue.length === 1 && v.queue[0].connected);
    expect(Date.parse(again.queue[0].waiting_since)).toBeGreaterThanOrEqual(t + 900);
    await zincati(f.baseUrl, "steady-state", a.id);
    expect((await pb).status).toBe(200);
  });

  it("stores a new place for a host that parks again after its old place lapsed unanswered, so a restart finds it", async () => {
    const f = await fleetWithKey();
    await putGroup(f.fleet, "default", { slots: 1, queue_wait_s: 20 });
    const [a, b] = await registerClients(f.fleet, 2);
    await zincati(f.baseUrl, "pre-reboot", a.id);
    const abort = new AbortController();
    const gone = SELF.fetch(new URL("v1/pre-reboot", f.baseUrl), {
      method: "POST",
      headers: { "fleet-lock-protocol": "true" },
      body: JSON.stringify({ client_params: { id: b.id, group: "default" } }),
      signal: abort.signal,
    }).catch((e) => e);
    await until(f.fleet, (g) => g.queue.some((q) => q.id === b.id));
    abort.abort();
    await gone;
    await until(f.fleet, (g) => g.queue.find((q) => q.id === b.id)?.connected === false);
    // Its wait runs out with nobody to answer; it asks again (its next tick).
    await setClockOffset(f.fleet, 25_000);
    const pb = park(f.baseUrl, b.id);
    const g = await until(f.fleet, (v) => v.queue.find((q) => q.id === b.id)?.connected === true);
    // What a restart would find is the new place, not the lapsed one.
    const stored = await runInDurableObject(coordinator(f.fleet), (_i, state) =>
      [...state.storage.kv.list<{ id: string; since: number }>({ prefix: "queue:" })].map(([, e]) => e),
    );
    expect(stored.map((e) => [e.id, new Date(e.since).toISOString()])).toEqual([[b.id, g.queue[0].waiting_since]]);
    await zincati(f.baseUrl, "steady-state", a.id);
    expect((await pb).status).toBe(200);
  });

  it("parks nothing anew when a request resumes after a restart: without a place it is answered at once", async () => {
    const f = await fleetWithKey();
    await putGroup(f.fleet, "default", { slots: 1, queue_wait_s: 20 });
    const [a, b] = await registerClients(f.fleet, 2);
    await zincati(f.baseUrl, "pre-reboot", a.id);
    const keyHash = await sha256Hex(f.key);
    const asked = await coordinator(f.fleet).fetch(preRebootWaitRequest(keyHash, { id: b.id, group: "default" }, true));
    expect(asked.status).toBe(200);
    expect(await asked.json()).toMatchObject({ ok: false, kind: "semaphore_full" });
    expect((await view(f.fleet)).queue).toEqual([]);
    expect(await storedQueue(f.fleet)).toEqual([]);
  });

  it("grants the first parked host when an operator force-releases a holder", async () => {
    const f = await fleetWithKey();
    await putGroup(f.fleet, "default", { slots: 1, queue_wait_s: 20 });
    const [a, b, c] = await registerClients(f.fleet, 3);
    await zincati(f.baseUrl, "pre-reboot", a.id);
    const [pb, pc] = await parkInOrder(f, [b.id, c.id]);
    const res = await call("DELETE", `/v1/fleets/${f.fleet}/reboot-groups/default/holders/${a.id}`);
    expect(res.status).toBe(200);
    expect(res.json.group.holders.map((h: { id: string }) => h.id)).toEqual([b.id]);
    expect((await pb).status).toBe(200);
    expect((await view(f.fleet)).queue.map((q) => q.id)).toEqual([c.id]);
    await call("DELETE", `/v1/fleets/${f.fleet}/reboot-groups/default/holders/${b.id}`);
    expect((await pc).status).toBe(200);
  });

  it("grants parked hosts when the group grows, as many as the new slots allow", async () => {
    const f = await fleetWithKey();
    await putGroup(f.fleet, "default", { slots: 1, queue_wait_s: 20 });
    const [a, b, c, d] = await registerClients(f.fleet, 4);
    await zincati(f.baseUrl, "pre-reboot", a.id);
    const log: string[] = [];
    const [pb, pc, pd] = await parkInOrder(f, [b.id, c.id, d.id], log);
    const g = await putGroup(f.fleet, "default", { slots: 3 });
    expect(g.holders.map((h: { id: string }) => h.id)).toEqual([a.id, b.id, c.id]);
    expect(g.queue.map((q: Queued) => q.id)).toEqual([d.id]);
    expect((await pb).status).toBe(200);
    expect((await pc).status).toBe(200);
    await sleep(100);
    expect(log).toEqual([b.id, c.id]);
    await zincati(f.baseUrl, "steady-state", a.id);
    expect((await pd).status).toBe(200);
  });

  it("grants a parked host when its group's maintenance window opens, not before", async () => {
    const f = await fleetWithKey();
    // Monday 2026-11-23: the window opens at 12:00 UTC; the coordinator's clock stands 1.5 s before.
    const opens = Date.UTC(2026, 10, 23, 12, 0);
    await setClockOffset(f.fleet, opens - 1500 - Date.now());
    const windows = [{ days: ["Mon"], start_time: "12:00", length_minutes: 30, time_zone: "UTC" }];
    await putGroup(f.fleet, "default", { slots: 1, queue_wait_s: 20, windows });
    const [a] = await registerClients(f.fleet, 1);
    const log: string[] = [];
    const [pa] = await parkInOrder(f, [a.id], log);
    const g = await view(f.fleet);
    expect(g.open_now).toBe(false);
    expect(g.holders).toEqual([]);
    await sleep(700);
    expect(log).toEqual([]);
    const res = await pa;
    expect(res.status).toBe(200);
    expect((await view(f.fleet)).holders.map((h) => h.id)).toEqual([a.id]);
  });

  it("never grants while the group is paused: parked hosts are refused with group_paused when their wait ends", async () => {
    const f = await fleetWithKey();
    await putGroup(f.fleet, "default", { slots: 1, queue_wait_s: 2 });
    const [a, b, c] = await registerClients(f.fleet, 3);
    await zincati(f.baseUrl, "pre-reboot", a.id);
    const [pb] = await parkInOrder(f, [b.id]);
    await putGroup(f.fleet, "default", { slots: 1, paused: true });
    await zincati(f.baseUrl, "steady-state", a.id);
    await putGroup(f.fleet, "default", { slots: 2, paused: true });
    // Paused: nobody parks anew.
    expect((await zincati(f.baseUrl, "pre-reboot", c.id)).json.kind).toBe("group_paused");
    const res = await pb;
    expect(res.status).toBe(409);
    expect(res.json.kind).toBe("group_paused");
    const g = await view(f.fleet);
    expect(g.holders).toEqual([]);
    expect(g.queue).toEqual([]);
  });

  it("keeps the place of a host whose connection went: its grant waits unclaimed and its next pre-reboot is 200 at once", async () => {
    const f = await fleetWithKey();
    await putGroup(f.fleet, "default", { slots: 1, queue_wait_s: 20 });
    const [a, b, c] = await registerClients(f.fleet, 3);
    await zincati(f.baseUrl, "pre-reboot", a.id);
    const abort = new AbortController();
    const gone = SELF.fetch(new URL("v1/pre-reboot", f.baseUrl), {
      method: "POST",
      headers: { "fleet-lock-protocol": "true" },
      body: JSON.stringify({ client_params: { id: b.id, group: "default" } }),
      signal: abort.signal,
    }).catch((e) => e);
    await until(f.fleet, (g) => g.queue.some((q) => q.id === b.id));
    const [pc] = await parkInOrder(f, [c.id]);
    abort.abort();
    await gone;
    await until(f.fleet, (g) => g.queue.find((q) => q.id === b.id)?.connected === false);

    await zincati(f.baseUrl, "steady-state", a.id);
    const g = await view(f.fleet);
    // b keeps its place: it got the slot, kept for it; c still waits.
    expect(g.holders.map((h) => [h.id, h.unclaimed_until !== null])).toEqual([[b.id, true]]);
    expect(g.queue.map((q) => q.id)).toEqual([c.id]);
    // b comes back at its next tick: 200 at once, and the grant is claimed.
    expect((await zincati(f.baseUrl, "pre-reboot", b.id)).status).toBe(200);
    expect((await view(f.fleet)).holders).toMatchObject([{ id: b.id, unclaimed_until: null }]);
    await zincati(f.baseUrl, "steady-state", b.id);
    expect((await pc).status).toBe(200);
  });

  it(`releases a grant nobody came back for after ${UNCLAIMED_GRANT_S} s and gives it to the next host`, async () => {
    const f = await fleetWithKey();
    await putGroup(f.fleet, "default", { slots: 1, queue_wait_s: 30 });
    const [a, b, c] = await registerClients(f.fleet, 3);
    await zincati(f.baseUrl, "pre-reboot", a.id);
    const abort = new AbortController();
    const gone = SELF.fetch(new URL("v1/pre-reboot", f.baseUrl), {
      method: "POST",
      headers: { "fleet-lock-protocol": "true" },
      body: JSON.stringify({ client_params: { id: b.id, group: "default" } }),
      signal: abort.signal,
    }).catch((e) => e);
    await until(f.fleet, (g) => g.queue.some((q) => q.id === b.id));
    abort.abort();
    await gone;
    await until(f.fleet, (g) => g.queue.find((q) => q.id === b.id)?.connected === false);
    await zincati(f.baseUrl, "steady-state", a.id);
    expect((await view(f.fleet)).holders).toMatchObject([{ id: b.id }]);
    // Not before the bound…
    await setClockOffset(f.fleet, (UNCLAIMED_GRANT_S - 5) * 1000);
    const [pc] = await parkInOrder(f, [c.id]);
    await runDurableObjectAlarm(coordinator(f.fleet));
    expect((await view(f.fleet)).holders.map((h) => h.id)).toEqual([b.id]);
    // …and at it: released, and the next parked host is answered.
    await setClockOffset(f.fleet, UNCLAIMED_GRANT_S * 1000);
    await runDurableObjectAlarm(coordinator(f.fleet));
    expect((await pc).status).toBe(200);
    expect((await view(f.fleet)).holders.map((h) => h.id)).toEqual([c.id]);
  });

  it("answers parked hosts across an eviction of the coordinator, keeps their places, and never over-grants", async () => {
    const f = await fleetWithKey();
    await putGroup(f.fleet, "default", { slots: 2, queue_wait_s: 20 });
    const clients = await registerClients(f.fleet, 6);
    const [a, b, ...waiting] = clients;
    await zincati(f.baseUrl, "pre-reboot", a.id);
    await zincati(f.baseUrl, "pre-reboot", b.id);
    const log: string[] = [];
    const pending = await parkInOrder(
      f,
      waiting.map((w) => w.id),
      log,
    );
    await resetCoordinator(f.fleet);
    // Each parked request is asked again and finds its place: the queue is as it was.
    const g = await until(f.fleet, (v) => v.queue.length === 4 && v.queue.every((q) => q.connected));
    expect(g.queue.map((q) => q.id)).toEqual(waiting.map((w) => w.id));
    expect(g.holders.map((h) => h.id)).toEqual([a.id, b.id]);
    expect(log).toEqual([]);

    await zincati(f.baseUrl, "steady-state", a.id);
    expect((await pending[0]).status).toBe(200);
    await resetCoordinator(f.fleet);
    await zincati(f.baseUrl, "steady-state", b.id);
    expect((await pending[1]).status).toBe(200);
    await sleep(100);
    const after = await view(f.fleet);
    expect(after.holders.map((h) => h.id)).toEqual([waiting[0].id, waiting[1].id]);
    expect(log).toEqual([waiting[0].id, waiting[1].id]);
    // Nobody else was granted: the two left are refused once the group has no room (wait 0 now).
    await putGroup(f.fleet, "default", { slots: 2, queue_wait_s: 0 });
    expect((await zincati(f.baseUrl, "pre-reboot", clients[0].id)).json.kind).toBe("semaphore_full");
    await zincati(f.baseUrl, "steady-state", waiting[0].id);
    expect((await pending[2]).status).toBe(200);
    await zincati(f.baseUrl, "steady-state", waiting[1].id);
    expect((await pending[3]).status).toBe(200);
    expect((await view(f.fleet)).holders.length).toBeLessThanOrEqual(2);
  });

  it("gives up a parked host's place when it reports steady state instead", async () => {
    const f = await fleetWithKey();
    await putGroup(f.fleet, "default", { slots: 1, queue_wait_s: 20 });
    const [a, b, c] = await registerClients(f.fleet, 3);
    await zincati(f.baseUrl, "pre-reboot", a.id);
    const [pb, pc] = await parkInOrder(f, [b.id, c.id]);
    expect((await zincati(f.baseUrl, "steady-state", b.id)).json).toEqual({ released: false });
    expect((await pb).json.kind).toBe("semaphore_full");
    expect((await view(f.fleet)).queue.map((q) => q.id)).toEqual([c.id]);
    await zincati(f.baseUrl, "steady-state", a.id);
    expect((await pc).status).toBe(200);
  });
});

describe("every FleetLock client's URL shape", () => {
  /** As Flatcar's fleetlockctl builds it: fmt.Sprintf("%s/%s", base, "v1/…"). */
  const flatcar = (base: string, op: Op, id: string, group = "default") =>
    SELF.fetch(`${base}/v1/${op}`, {
      method: "POST",
      headers: { "fleet-lock-protocol": "true" },
      body: JSON.stringify({ client_params: { id, group } }),
    });

  it("serves …/KEY//v1/pre-reboot and …//v1/steady-state like the single-slash form", async () => {
    const f = await fleetWithKey();
    await putGroup(f.fleet, "default", { slots: 1 });
    const [a, b] = await registerClients(f.fleet, 2);
    expect(f.baseUrl.endsWith("/")).toBe(true);
    const pre = await flatcar(f.baseUrl, "pre-reboot", a.id);
    expect(pre.status).toBe(200);
    expect(await pre.json()).toEqual({ granted: true });
    expect(new URL(`${f.baseUrl}/v1/pre-reboot`).pathname).toContain("//v1/");
    const full = await flatcar(f.baseUrl, "pre-reboot", b.id);
    expect(full.status).toBe(409);
    expect(((await full.json()) as { kind: string }).kind).toBe("semaphore_full");
    const steady = await flatcar(f.baseUrl, "steady-state", a.id);
    expect(await steady.json()).toEqual({ released: true });
    // Without the trailing slash the same client sends the single-slash form.
    expect((await flatcar(f.baseUrl.slice(0, -1), "pre-reboot", b.id)).status).toBe(200);
    expect((await flatcar(f.baseUrl.slice(0, -1), "steady-state", b.id)).status).toBe(200);
  });

  it("serves the double slash after a templated group too, and other methods get 405 there", async () => {
    const f = await fleetWithKey();
    await putGroup(f.fleet, "workers", { slots: 1 });
    const [a] = await registerClients(f.fleet, 1, "workers");
    const base = `${f.baseUrl}workers/`;
    expect((await flatcar(base, "pre-reboot", a.id, "workers")).status).toBe(200);
    expect((await view(f.fleet, "workers")).holders.map((h) => h.id)).toEqual([a.id]);
    expect(await (await flatcar(base, "steady-state", a.id, "workers")).json()).toEqual({ released: true });
    const get = await SELF.fetch(`${f.baseUrl}/v1/pre-reboot`, { headers: { "fleet-lock-protocol": "true" } });
    expect(get.status).toBe(405);
    expect(((await get.json()) as { kind: string }).kind).toBe("method_not_allowed");
  });
});
