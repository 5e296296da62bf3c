/**
 * Queue hygiene (docs/reboot-safety.md): a host parked for a server that is removed (or renamed) never gets a
 * slot; an operator can take a host out of the queue; and where the runtime cannot tell that a
 * parked client went away, a grant answered to it is kept as unclaimed until the host calls again.
 */
import { runInDurableObject } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import { drain, type Queue } from "../src/fleetlock/queue";
import { newGroup } from "../src/fleetlock/semaphore";
import { call, fireTimersNow } from "./helpers";
import {
  fleetWithKey,
  parkInOrder,
  putGroup,
  registerClients,
  setClockOffset,
  until,
  view,
  zincati,
} from "./fleetlock-helpers";
import { coordinator, sleep } from "./support/objects";

/** Where the runtime cannot report a hang-up: parked calls are vouched for this long (PARK_TRUST_S). */
const distrustParkedCalls = (fleet: string, trustMs: number) =>
  runInDurableObject(coordinator(fleet), (instance) => {
    (instance as unknown as { parts: { parked: { trustMs: number | null } } }).parts.parked.trustMs = trustMs;
  });

describe("a removed server's parked host", () => {
  it("leaves every queue when the server is force-removed, is answered unknown_client, and is never granted", async () => {
    const f = await fleetWithKey();
    await putGroup(f.fleet, "default", { slots: 1, queue_wait_s: 20 });
    const [a, b, c] = await registerClients(f.fleet, 3);
    expect((await zincati(f.baseUrl, "pre-reboot", a.id)).status).toBe(200);
    const [pb, pc] = await parkInOrder(f, [b.id, c.id]);

    const removed = await call("POST", `/v1/servers/${b.serverId}/decommission`, {
      body: { force: true, reason: "dead disk" },
    });
    expect(removed.status).toBe(200);
    const answer = await pb;
    expect(answer.status).toBe(403);
    expect(answer.json.kind).toBe("unknown_client");
    expect((await view(f.fleet)).queue.map((q) => q.id)).toEqual([c.id]);

    // The slot frees: it goes to the next live host, never to the removed one.
    await zincati(f.baseUrl, "steady-state", a.id);
    expect((await pc).status).toBe(200);
    expect((await view(f.fleet)).holders.map((h) => h.id)).toEqual([c.id]);
    expect((await zincati(f.baseUrl, "pre-reboot", b.id)).json.kind).toBe("unknown_client");
  });

  it("is dropped, not granted, when the news of its id's change arrives after it parked", async () => {
    const f = await fleetWithKey();
    await putGroup(f.fleet, "default", { slots: 1, queue_wait_s: 20 });
    const [a, b, c] = await registerClients(f.fleet, 3);
    await zincati(f.baseUrl, "pre-reboot", a.id);
    const [pb, pc] = await parkInOrder(f, [b.id, c.id]);
    // The operator gives b's server another FleetLock id: the old id is nobody's any more.
    expect((await call("PATCH", `/v1/servers/${b.serverId}`, { body: { fleetlock_id: `${b.id}-new` } })).status).toBe(
      200,
    );
    expect((await pb).json.kind).toBe("unknown_client");
    await zincati(f.baseUrl, "steady-state", a.id);
    expect((await pc).status).toBe(200);
    expect((await view(f.fleet)).holders.map((h) => h.id)).toEqual([c.id]);
  });

  it("is skipped by the drain whenever its server no longer owns the id (pure queue rule)", () => {
    const g = newGroup(1, 0);
    const q: Queue = [
      { id: "gone", server_id: "s-gone", since: 1, deadline: 10_000, seq: 1 },
      { id: "live", server_id: "s-live", since: 2, deadline: 10_000, seq: 2 },
    ];
    const d = drain(g, q, 5, () => true, { eligible: (e) => e.server_id !== "s-gone" });
    expect(d.granted.map((x) => x.entry.id)).toEqual(["live"]);
    expect(d.dropped.map((e) => e.id)).toEqual(["gone"]);
    expect(d.queue).toEqual([]);
  });
});

describe("an operator takes a host out of the queue", () => {
  it("refuses its waiting request, keeps the others in order, audits it, and 404s a host that is not queued", async () => {
    const f = await fleetWithKey();
    await putGroup(f.fleet, "default", { slots: 1, queue_wait_s: 20 });
    const [a, b, c] = await registerClients(f.fleet, 3);
    await zincati(f.baseUrl, "pre-reboot", a.id);
    const [pb, pc] = await parkInOrder(f, [b.id, c.id]);

    const out = await call("DELETE", `/v1/fleets/${f.fleet}/reboot-groups/default/queue/${b.id}`);
    expect(out.status).toBe(200);
    expect(out.json.removed).toMatchObject({ id: b.id, server_id: b.serverId });
    expect(out.json.group.queue.map((q: { id: string }) => q.id)).toEqual([c.id]);
    const refused = await pb;
    expect(refused.status).toBe(409);
    expect(refused.json.value).toMatch(/operator took this host out of the queue/);

    const again = await call("DELETE", `/v1/fleets/${f.fleet}/reboot-groups/default/queue/${b.id}`);
    expect(again.status).toBe(404);
    expect(again.json.error.code).toBe("not_queued");
    // A holder is not a queued host either: it is released with DELETE …/holders/{id}.
    expect((await call("DELETE", `/v1/fleets/${f.fleet}/reboot-groups/default/queue/${a.id}`)).json.error.code).toBe(
      "not_queued",
    );
    const audit = await call("GET", `/v1/audit?target=fleet:${f.fleet}&limit=50`);
    expect(audit.json.items.filter((e: { action: string }) => e.action === "reboot_group.dequeue")).toHaveLength(1);

    await zincati(f.baseUrl, "steady-state", a.id);
    expect((await pc).status).toBe(200);
  });
});

describe("an operator names a queued host by its server", () => {
  it("takes it out by hostname, fleet/hostname or server id; a name that matches nothing is 404 saying what was tried", async () => {
    const f = await fleetWithKey();
    await putGroup(f.fleet, "default", { slots: 1, queue_wait_s: 20 });
    const [a, b, c, d] = await registerClients(f.fleet, 4);
    await zincati(f.baseUrl, "pre-reboot", a.id);
    const parked = await parkInOrder(f, [b.id, c.id, d.id]);
    const queue = `/v1/fleets/${f.fleet}/reboot-groups/default/queue`;
    expect((await call("DELETE", `${queue}/${b.hostname}`)).json.removed).toMatchObject({
      id: b.id,
      server_id: b.serverId,
    });
    expect((await call("DELETE", `${queue}/${encodeURIComponent(`${f.fleet}/${c.hostname}`)}`)).json.removed.id).toBe(
      c.id,
    );
    expect((await call("DELETE", `${queue}/${d.serverId}`)).json.removed.id).toBe(d.id);
    const none = await call("DELETE", `${queue}/${b.hostname}`);
    expect(none.status).toBe(404);
    expect(none.json.error.code).toBe("not_queued");
    expect(none.json.error.message).toMatch(/FleetLock id, a server id and a hostname/);
    for (const p of parked) expect((await p).status).toBe(409);
  });
});

/**
 * a holds the slot, b parks, and a's steady state hands the slot to b while the runtime no longer
 * vouches for b's request.
 */
async function grantToDistrustedPark(slots: { queue_wait_s: number; unclaimed_grant_s?: number }) {
  const f = await fleetWithKey();
  await putGroup(f.fleet, "default", { slots: 1, ...slots });
  const [a, b, c] = await registerClients(f.fleet, 3);
  await distrustParkedCalls(f.fleet, 0);
  await zincati(f.baseUrl, "pre-reboot", a.id);
  const [pb] = await parkInOrder(f, [b.id]);
  await sleep(5);
  await zincati(f.baseUrl, "steady-state", a.id);
  // The request is answered (the host may be there).
  expect((await pb).status).toBe(200);
  return { f, b, c };
}

describe("a runtime that cannot report a parked client's hang-up", () => {
  it("answers a grant to a call parked past the trust bound, but keeps the slot only until the group's unclaimed bound unless the host calls again", async () => {
    const { f, b, c } = await grantToDistrustedPark({ queue_wait_s: 30, unclaimed_grant_s: 60 });
    // The slot is held as unclaimed for it.
    const held = (await view(f.fleet)).holders;
    expect(held.map((h) => h.id)).toEqual([b.id]);
    expect(held[0].unclaimed_until).not.toBeNull();

    // b never calls again (its client had gone): not before the bound…
    await setClockOffset(f.fleet, 55_000);
    const [pc] = await parkInOrder(f, [c.id]);
    await fireTimersNow(coordinator(f.fleet));
    expect((await view(f.fleet)).holders.map((h) => h.id)).toEqual([b.id]);
    // …and at it, the slot goes to c.
    await setClockOffset(f.fleet, 61_000);
    await fireTimersNow(coordinator(f.fleet));
    expect((await pc).status).toBe(200);
    expect((await view(f.fleet)).holders.map((h) => h.id)).toEqual([c.id]);
  });

  it("keeps the slot of a host that did get its answer once it calls again (steady state releases it as usual)", async () => {
    const { f, b } = await grantToDistrustedPark({ queue_wait_s: 30 });
    // Its pre-reboot again (a retry) claims the slot: no bound any more.
    expect((await zincati(f.baseUrl, "pre-reboot", b.id)).status).toBe(200);
    expect((await view(f.fleet)).holders).toMatchObject([{ id: b.id, unclaimed_until: null }]);
    expect((await zincati(f.baseUrl, "steady-state", b.id)).json).toEqual({ released: true });
  });

  it("trusts a call parked for less than the bound: its grant is an ordinary one", async () => {
    const f = await fleetWithKey();
    await putGroup(f.fleet, "default", { slots: 1, queue_wait_s: 30 });
    const [a, b] = await registerClients(f.fleet, 2);
    await distrustParkedCalls(f.fleet, 60_000);
    await zincati(f.baseUrl, "pre-reboot", a.id);
    const [pb] = await parkInOrder(f, [b.id]);
    await zincati(f.baseUrl, "steady-state", a.id);
    expect((await pb).status).toBe(200);
    expect((await until(f.fleet, (g) => g.holders.length === 1)).holders).toMatchObject([
      { id: b.id, unclaimed_until: null },
    ]);
  });
});
