/**
 * The Rollout object's storage format: tables created once per format, not on every wake; storage
 * from older code brought to the current format when the object wakes; nothing written for an id
 * that never held a rollout.
 */
import { env, evictDurableObject, runInDurableObject } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import { rolloutOf } from "../src/objects/stubs";
import { FORMAT_KEY, ROLLOUT_FORMAT, storedFormat, upgradeRolloutStorage } from "../src/rollouts/storage-format";
import { call } from "./helpers";
import { fleetWithAgent, getRollout, reconcileApplying, rolloutStub, startRollout } from "./rollout-helpers";

const hasIndex = (state: DurableObjectState, name: string) =>
  state.storage.sql.exec("SELECT 1 FROM sqlite_master WHERE type = 'index' AND name = ?", name).toArray().length > 0;

describe("rollout storage format", () => {
  it("a rollout woken with storage at the current format does not create its tables again", async () => {
    const { fleet } = await fleetWithAgent(2);
    const r = await startRollout({ fleet, concurrency: 1 });
    const stub = rolloutStub(r.id);
    await runInDurableObject(stub, (_i, state) => {
      expect(state.storage.kv.get(FORMAT_KEY)).toBe(ROLLOUT_FORMAT);
      expect(hasIndex(state, "targets_seq")).toBe(true);
      // Were the format's steps run again on wake, they would bring this index back.
      state.storage.sql.exec("DROP INDEX targets_seq");
    });
    await evictDurableObject(stub);

    expect((await getRollout(r.id)).counts).toMatchObject({ applying: 1, queued: 1 });

    await runInDurableObject(stub, (_i, state) => {
      expect(hasIndex(state, "targets_seq")).toBe(false);
      expect(state.storage.kv.get(FORMAT_KEY)).toBe(ROLLOUT_FORMAT);
    });
  });

  it("a rollout written before formats were recorded is brought to the current format when it wakes, and goes on", async () => {
    const { fleet, hosts } = await fleetWithAgent(2);
    const r = await startRollout({ fleet, concurrency: 1 });
    const stub = rolloutStub(r.id);
    // As the code before formats left it: the format 1 tables, no stamp.
    await runInDurableObject(stub, (_i, state) => {
      state.storage.sql.exec("DROP INDEX targets_waiting");
      state.storage.kv.delete(FORMAT_KEY);
      expect(storedFormat(state.storage.kv)).toBe(1);
    });
    await evictDurableObject(stub);

    expect((await getRollout(r.id)).counts).toMatchObject({ applying: 1, queued: 1 });

    await runInDurableObject(stub, (_i, state) => {
      expect(state.storage.kv.get(FORMAT_KEY)).toBe(ROLLOUT_FORMAT);
      expect(hasIndex(state, "targets_waiting")).toBe(true);
    });
    await reconcileApplying(r.id, hosts);
    await reconcileApplying(r.id, hosts);
    const done = await getRollout(r.id);
    expect(done.state).toBe("succeeded");
    expect(done.counts.done).toBe(2);
  });

  it("refuses storage in a format newer than the code, leaving it as it is", async () => {
    const { fleet } = await fleetWithAgent(1);
    const r = await startRollout({ fleet });
    await runInDurableObject(rolloutStub(r.id), (_i, state) => {
      state.storage.kv.put(FORMAT_KEY, ROLLOUT_FORMAT + 1);
      expect(() => upgradeRolloutStorage(state.storage, storedFormat(state.storage.kv))).toThrow(
        /newer than this code/,
      );
      expect(state.storage.kv.get(FORMAT_KEY)).toBe(ROLLOUT_FORMAT + 1);
      // Put back, so the object can load again after this test.
      state.storage.kv.put(FORMAT_KEY, ROLLOUT_FORMAT);
    });
  });

  it("writes nothing into an object no rollout was started in", async () => {
    const id = crypto.randomUUID();
    expect((await call("GET", `/v1/rollouts/${id}`)).status).toBe(404);
    expect(await rolloutOf(env, id).targets({ after: -1, limit: 10 })).toBeNull();
    await runInDurableObject(rolloutStub(id), (_i, state) => {
      expect([...state.storage.kv.list()]).toEqual([]);
      expect(state.storage.sql.exec("SELECT name FROM sqlite_master").toArray()).toEqual([]);
    });
  });
});
