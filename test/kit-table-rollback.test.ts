import { env, runInDurableObject } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import type { RolloutParts } from "../src/rollouts/parts";
import { RolloutInput } from "../src/rollouts/schemas";
import { createRollout } from "../src/rollouts/service";
import type { CoordinatorParts } from "../src/fleetlock/parts";
import { call } from "./helpers";
import { AGENT, drain, fleetWithAgent, NEW, rolloutStub } from "./rollout-helpers";
import { coordinator } from "./support/objects";
import { fleetWithKey, putGroup, registerClients, zincati } from "./fleetlock-helpers";

// The kit's tables (_outbox, _timers) are created by the first write that needs them, and the
// object remembers that they exist. A CREATE made inside a transaction that then throws is undone
// with it: an object that went on believing in the table would fail every later statement on it
// ("no such table") until it restarted.

const partsOf = <T>(instance: unknown) => (instance as { parts: T }).parts;

const tables = (storage: DurableObjectStorage) =>
  storage.sql
    .exec<{ name: string }>("SELECT name FROM sqlite_master WHERE name IN ('_outbox', '_timers') ORDER BY name")
    .toArray()
    .map((r) => r.name);

describe("a kit table created in a turn that rolled back", () => {
  it("is created again by the rollout's next start: the retried start runs, its rows and timers stored", async () => {
    const { fleet } = await fleetWithAgent(2);
    const id = crypto.randomUUID();
    const input = RolloutInput.parse({ fleet, agent: AGENT, image: NEW, version: "2.0.0", concurrency: 1 });
    // The object's first start fails late in its turn (its core's write, after the audit row and
    // timers were queued, so after both kit tables were created in it): all of it rolls back.
    await runInDurableObject(rolloutStub(id), (instance) => {
      const store = partsOf<RolloutParts>(instance).store;
      const putCore = store.putCore.bind(store);
      store.putCore = () => {
        store.putCore = putCore;
        throw new Error("storage failed mid-turn");
      };
    });
    await expect(createRollout(env, "token:test", input, () => id)).rejects.toThrow("storage failed mid-turn");
    await runInDurableObject(rolloutStub(id), (_i, state) => expect(tables(state.storage)).toEqual([]));
    // The same request again (its answer was an error): the same rollout, started now.
    const started = await createRollout(env, "token:test", input, () => id);
    expect(started.state).toBe("running");
    await runInDurableObject(rolloutStub(id), (instance, state) => {
      expect(tables(state.storage)).toEqual(["_outbox", "_timers"]);
      expect(partsOf<RolloutParts>(instance).scheduler.dueAt("outbox")).not.toBeNull();
    });
    await drain(id);
    const got = await call("GET", `/v1/rollouts/${id}`);
    expect(got.status).toBe(200);
    expect(got.json).toMatchObject({ state: "running", counts: { applying: 1, queued: 1 } });
    // Its D1 rows went out through the outbox the rolled-back turn had created first.
    const row = await env.DB.prepare("SELECT COUNT(*) AS n FROM rollout_targets WHERE rollout_id = ?")
      .bind(id)
      .first<{ n: number }>();
    expect(row!.n).toBe(2);
  });

  it("in a rollout savepoint that rolled back, is not believed once the outer turn commits without it", async () => {
    const id = crypto.randomUUID();
    await runInDurableObject(rolloutStub(id), (instance, state) => {
      const { store, scheduler } = partsOf<RolloutParts>(instance);
      const at = Date.now() + 60_000;
      store.transaction(() => {
        // A savepoint creates the table and is undone; the outer turn commits other writes only.
        expect(() =>
          store.transaction(() => {
            scheduler.schedule("probe", at, null, { noLaterThan: true });
            throw new Error("inner step failed");
          }),
        ).toThrow("inner step failed");
        store.setBlocked(1, "server-a", []);
      });
      expect(tables(state.storage)).toEqual([]);
      // The next turns use the table: created again, and the undone timer is asked for again.
      scheduler.schedule("kept", at);
      store.transaction(() => scheduler.schedule("probe", at, null, { noLaterThan: true }));
      expect(scheduler.dueAt("kept")).toBe(at);
      expect(scheduler.dueAt("probe")).toBe(at);
      expect(tables(state.storage)).toEqual(["_timers"]);
    });
  });

  it("made in a savepoint that committed, is not believed when the outer turn then rolls back", async () => {
    const id = crypto.randomUUID();
    await runInDurableObject(rolloutStub(id), (instance, state) => {
      const { store, scheduler } = partsOf<RolloutParts>(instance);
      const at = Date.now() + 60_000;
      expect(() =>
        store.transaction(() => {
          store.transaction(() => scheduler.schedule("probe", at));
          throw new Error("outer step failed");
        }),
      ).toThrow("outer step failed");
      expect(tables(state.storage)).toEqual([]);
      scheduler.schedule("kept", at);
      expect(scheduler.dueAt("kept")).toBe(at);
    });
  });

  it("cannot happen in the coordinator: a turn that throws keeps its writes, its kit table with them", async () => {
    const fleet = crypto.randomUUID();
    const at = Date.now() + 60_000;
    // A first turn that creates the scheduler's table, then throws: the implicit turn is not undone.
    await expect(
      runInDurableObject(coordinator(fleet), (instance) => {
        partsOf<CoordinatorParts>(instance).scheduler.schedule("probe", at);
        throw new Error("the handler failed after its write");
      }),
    ).rejects.toThrow("the handler failed");
    await runInDurableObject(coordinator(fleet), (instance, state) => {
      expect(tables(state.storage)).toEqual(["_timers"]);
      expect(partsOf<CoordinatorParts>(instance).scheduler.dueAt("probe")).toBe(at);
    });
  });

  it("a coordinator's host and operator calls open no explicit transaction (nothing there to roll a CREATE back)", async () => {
    const f = await fleetWithKey();
    // Counted on the coordinator's own storage, from its first call on.
    const opened: string[] = [];
    await runInDurableObject(coordinator(f.fleet), (_i, state) => {
      const storage = state.storage as unknown as Record<string, (...a: unknown[]) => unknown>;
      for (const name of ["transactionSync", "transaction"]) {
        const real = storage[name].bind(storage);
        storage[name] = (...a: unknown[]) => (opened.push(name), real(...a));
      }
    });
    await putGroup(f.fleet, "default", { slots: 1 });
    const [a, b] = await registerClients(f.fleet, 2);
    expect((await zincati(f.baseUrl, "pre-reboot", a.id)).status).toBe(200);
    // The second host is refused while the one slot is held; the first one's steady-state frees it.
    expect((await zincati(f.baseUrl, "pre-reboot", b.id)).status).not.toBe(200);
    expect((await zincati(f.baseUrl, "steady-state", a.id)).status).toBe(200);
    expect((await zincati(f.baseUrl, "pre-reboot", b.id)).status).toBe(200);
    await call("PUT", `/v1/fleets/${f.fleet}/reboot-groups/default`, { body: { slots: 2 } });
    expect(opened).toEqual([]);
    // The count sees what the object's own storage opens: one opened here is counted.
    await runInDurableObject(coordinator(f.fleet), (_i, state) => state.storage.transactionSync(() => {}));
    expect(opened).toEqual(["transactionSync"]);
  });
});
