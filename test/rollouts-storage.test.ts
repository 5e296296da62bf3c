/**
 * The Rollout object's storage format: tables created once per format, not on every wake; storage
 * from older code brought to the current format when the object wakes; nothing written for an id
 * that never held a rollout.
 */
import { env, evictDurableObject, runInDurableObject } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import { rolloutOf } from "../src/objects/stubs";
import { FORMAT_KEY, ROLLOUT_FORMAT, storedFormat, upgradeRolloutStorage } from "../src/rollouts/storage-format";
import { RolloutStore } from "../src/rollouts/store";
import { TargetRows } from "../src/rollouts/target-rows";
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

  it("a rollout stored in format 3 gets the partial indexes and keeps its event log, whose ids still grow", async () => {
    const { fleet, hosts } = await fleetWithAgent(2);
    const r = await startRollout({ fleet, concurrency: 1 });
    const stub = rolloutStub(r.id);
    // As format 3 left it: the full indexes, an event log with AUTOINCREMENT and events in it.
    const lastId = await runInDurableObject(stub, (_i, state) => {
      const sql = state.storage.sql;
      for (const idx of ["targets_unwarned", "targets_open_phase", "events_slow"]) sql.exec(`DROP INDEX ${idx}`);
      sql.exec("CREATE INDEX targets_duration ON targets (pass, state, duration_ms)");
      sql.exec("CREATE INDEX targets_started ON targets (pass, state, warned, started_at)");
      sql.exec("CREATE INDEX targets_phase ON targets (pass, phase, state)");
      sql.exec("CREATE INDEX events_kind ON events (kind, id)");
      const events = sql
        .exec<{ id: number; at: number; kind: string; server_id: string | null; details: string | null }>(
          "SELECT * FROM events",
        )
        .toArray();
      sql.exec("DROP TABLE events");
      sql.exec(`CREATE TABLE events (id INTEGER PRIMARY KEY AUTOINCREMENT, at INTEGER NOT NULL, kind TEXT NOT NULL,
        server_id TEXT, details TEXT)`);
      for (const e of events)
        sql.exec("INSERT INTO events VALUES (?, ?, ?, ?, ?)", e.id, e.at, e.kind, e.server_id, e.details);
      state.storage.kv.put(FORMAT_KEY, 3);
      return events.at(-1)!.id;
    });
    await evictDurableObject(stub);
    await reconcileApplying(r.id, hosts);
    await runInDurableObject(stub, (_i, state) => {
      expect(state.storage.kv.get(FORMAT_KEY)).toBe(ROLLOUT_FORMAT);
      for (const idx of ["targets_duration", "targets_started", "targets_phase", "events_kind"])
        expect(hasIndex(state, idx)).toBe(false);
      for (const idx of ["targets_unwarned", "targets_open_phase", "events_slow"])
        expect(hasIndex(state, idx)).toBe(true);
    });
    await reconcileApplying(r.id, hosts);
    expect((await getRollout(r.id)).state).toBe("succeeded");
    const events = (await call("GET", `/v1/rollouts/${r.id}/events?limit=100`)).json.items as { id: number }[];
    expect(events.filter((e) => e.id > lastId).length).toBeGreaterThan(0);
    const ids = events.map((e) => e.id);
    expect(ids.every((id, i) => i === 0 || id > ids[i - 1])).toBe(true);
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

describe("rollout storage reads", () => {
  it("the next queued target is found by reading about as many rows as it returns, not the whole pass", async () => {
    const stub = env.ROLLOUT.get(env.ROLLOUT.idFromName(crypto.randomUUID()));
    await runInDurableObject(stub, (_i, state) => {
      upgradeRolloutStorage(state.storage, 0);
      const rows = new TargetRows(state.storage.sql);
      const n = 1_000;
      rows.insertFirstPass(
        "img",
        "2",
        Array.from({ length: n }, (_, i) => ({
          server_id: `s${i}`,
          hostname: `h${i}`,
          reboot_group: "default",
          state: "queued" as const,
          ended_at: null,
          reason: null,
          phase: i < n / 2 ? 0 : 1,
        })),
      );
      // Half the pass already taken: the next ones are further down the order.
      state.storage.sql.exec("UPDATE targets SET state = 'done' WHERE seq < 400");
      const exec = state.storage.sql.exec.bind(state.storage.sql);
      let read = 0;
      state.storage.sql.exec = ((query: string, ...bindings: unknown[]) => {
        const cursor = exec(query, ...bindings);
        return Object.assign(Object.create(cursor), {
          toArray: () => {
            const out = cursor.toArray();
            read += cursor.rowsRead;
            return out;
          },
        });
      }) as typeof state.storage.sql.exec;
      expect(rows.nextQueued(0, Date.now(), 2).map((t) => t.server_id)).toEqual(["s400", "s401"]);
      expect(read).toBeLessThan(10);
      read = 0;
      expect(rows.nextQueued(0, Date.now(), 2, 0).map((t) => t.server_id)).toEqual(["s400", "s401"]);
      expect(read).toBeLessThan(10);
    });
  });
});

describe("rollout store transactions", () => {
  it("an inner turn that rolls back, caught by the outer one, leaves the core the outer one moved", async () => {
    const { fleet } = await fleetWithAgent(1);
    const r = await startRollout({ fleet, concurrency: 1 });
    await runInDurableObject(rolloutStub(r.id), (_i, state) => {
      const store = new RolloutStore(state.storage);
      const before = store.load()!.core;
      store.transaction(() => {
        store.putCore({ ...before, version: before.version + 100 });
        try {
          store.transaction(() => {
            store.putCore({ ...before, version: before.version + 200 });
            throw new Error("the inner turn fails");
          });
        } catch {
          // The outer turn goes on without the inner one's writes.
        }
      });
      // The outer turn committed its core: stored, and in memory as stored.
      expect(state.storage.kv.get<{ version: number }>("core")!.version).toBe(before.version + 100);
      expect(store.load()!.core.version).toBe(before.version + 100);
      expect(new RolloutStore(state.storage).load()!.core.version).toBe(before.version + 100);
    });
  });
});
