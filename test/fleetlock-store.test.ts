import { evictDurableObject, runInDurableObject } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import { CoordinatorStore } from "../src/fleetlock/store";
import { COORDINATOR_FORMAT, FORMAT_KEY } from "../src/fleetlock/storage-format";
import { preRebootWaitRequest } from "../src/fleetlock/waits";
import { sha256Hex } from "../src/lib/crypto";
import { fleetWithKey, getGroup, putGroup, registerClients, zincati } from "./fleetlock-helpers";
import { coordinator } from "./support/objects";

const stampOf = (fleet: string) =>
  runInDurableObject(coordinator(fleet), (_i, state) => state.storage.kv.get(FORMAT_KEY));

type Queued = { id: string; connected: boolean };
const queueOf = async (fleet: string) => ((await getGroup(fleet, "default")) as unknown as { queue: Queued[] }).queue;

describe("coordinator storage format", () => {
  it("stamps its storage with the current format on the first write", async () => {
    const f = await fleetWithKey();
    expect(await stampOf(f.fleet)).toBe(COORDINATOR_FORMAT);
  });

  it("writes nothing into a coordinator that was only asked", async () => {
    const stub = coordinator(crypto.randomUUID());
    const params = { id: "node-a", group: "default" };
    const asked = await stub.fetch(preRebootWaitRequest("0".repeat(64), params, false));
    expect(asked.status).toBe(200);
    expect(await asked.json()).toMatchObject({ ok: false, kind: "unauthorized" });
    expect(await stub.steadyState("0".repeat(64), params)).toMatchObject({ ok: false, kind: "unauthorized" });
    expect(await stub.releaseRolloutSlot("rollout:r:s", "r")).toEqual({ ok: true, released: false });
    await runInDurableObject(stub, (_i, state) => {
      expect([...state.storage.kv.list()]).toEqual([]);
      expect(state.storage.sql.exec("SELECT name FROM sqlite_master").toArray()).toEqual([]);
    });
  });

  it("loads storage written before the format was recorded as the first format, and stamps it on its next write", async () => {
    const f = await fleetWithKey();
    await putGroup(f.fleet, "default", { slots: 1 });
    const [a] = await registerClients(f.fleet, 1);
    expect((await zincati(f.baseUrl, "pre-reboot", a.id)).status).toBe(200);
    await runInDurableObject(coordinator(f.fleet), (_i, state) => state.storage.kv.delete(FORMAT_KEY));
    await evictDurableObject(coordinator(f.fleet));

    expect((await getGroup(f.fleet, "default")).holders.map((h) => h.id)).toEqual([a.id]);
    // Reading stamps nothing; the release is the next write.
    expect(await stampOf(f.fleet)).toBeUndefined();
    expect((await zincati(f.baseUrl, "steady-state", a.id)).json).toEqual({ released: true });
    expect(await stampOf(f.fleet)).toBe(COORDINATOR_FORMAT);
  });

  it("refuses storage in a format newer than the code before reading any of it, leaving it as it is", async () => {
    const f = await fleetWithKey();
    await putGroup(f.fleet, "default", { slots: 1 });
    await runInDurableObject(coordinator(f.fleet), (_i, state) => {
      state.storage.kv.put(FORMAT_KEY, COORDINATOR_FORMAT + 1);
      // What the object does when it next loads.
      const store = new CoordinatorStore(state.storage);
      expect(() => store.config).toThrow(/newer than this code/);
      expect(() => store.clients.get("node-a")).toThrow(/newer than this code/);
      expect(state.storage.kv.get(FORMAT_KEY)).toBe(COORDINATOR_FORMAT + 1);
      // Put back, so the object can load again after this test.
      state.storage.kv.put(FORMAT_KEY, COORDINATOR_FORMAT);
    });
    expect((await getGroup(f.fleet, "default")).slots).toBe(1);
  });
});

describe("parked pre-reboot calls", () => {
  it("keeps the place of a host whose waiter closes (its client went away), shows it not connected, and keeps its grant unclaimed", async () => {
    const f = await fleetWithKey();
    await putGroup(f.fleet, "default", { slots: 1, queue_wait_s: 20 });
    const [a, b] = await registerClients(f.fleet, 2);
    await zincati(f.baseUrl, "pre-reboot", a.id);
    const stub = coordinator(f.fleet);
    const res = await stub.fetch(preRebootWaitRequest(await sha256Hex(f.key), { id: b.id, group: "default" }, false));
    expect(res.status).toBe(101);
    const ws = res.webSocket!;
    ws.accept();
    expect(await queueOf(f.fleet)).toMatchObject([{ id: b.id, connected: true }]);

    // The Worker closes the waiter when its client hangs up: the coordinator hears of it by the close alone.
    ws.close(1000, "client went away");
    for (let i = 0; (await queueOf(f.fleet))[0]?.connected !== false; i++) {
      if (i > 200) throw new Error("b still connected");
      await new Promise((r) => setTimeout(r, 20));
    }
    expect(await queueOf(f.fleet)).toMatchObject([{ id: b.id, connected: false }]);
    await zincati(f.baseUrl, "steady-state", a.id);
    const g = (await getGroup(f.fleet, "default")) as unknown as {
      holders: { id: string; unclaimed_until: string | null }[];
    };
    expect(g.holders.map((h) => [h.id, h.unclaimed_until !== null])).toEqual([[b.id, true]]);
  });
});
