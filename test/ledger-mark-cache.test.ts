import { env, runInDurableObject } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import type { ServerLedger } from "../src/ledger/durable-object";
import { INDEX_LEASE_MS } from "../src/ledger/projection";
import type { LedgerStore, ProjectedMark } from "../src/ledger/store";
import type { RolloutMark } from "../src/rollouts/ledger-side";
import { call, report, reportingServer, settle } from "./helpers";

// The ledger keeps the projection's mark in memory, since every heartbeat asks it whether the
// index's last_seen is due. These pin what that memory must never do: miss a newer mark, or keep
// one a rolled-back transaction undid. The same for the rollout marks every changed report reads.

const agents = [{ name: "compute", image: "compute:1", version: "1" }];

const storeOf = (instance: ServerLedger) => (instance as unknown as { parts: { store: LedgerStore } }).parts.store;

async function lastSeen(id: string) {
  const row = await env.DB.prepare("SELECT last_seen FROM servers WHERE id = ?")
    .bind(id)
    .first<{ last_seen: number }>();
  return row!.last_seen;
}

describe("a heartbeat's answer, computed once per report content", () => {
  it("answers a heartbeat after a new desired config with the new config's status, not the memory's", async () => {
    const { s } = await reportingServer(agents);
    const beat = () => call("PUT", "/v1/agent/inventory", { token: s.token, body: report(2, agents) });
    expect((await beat()).json).toMatchObject({ status: "realized", desired_generation: 2 });
    expect((await beat()).json).toMatchObject({ status: "realized", desired_generation: 2 });
    const next = [{ name: "compute", image: "compute:2", version: "2" }];
    expect((await call("PUT", `/v1/servers/${s.id}/desired`, { body: { generation: 3, agents: next } })).status).toBe(
      200,
    );
    const after = (await beat()).json;
    expect(after).toMatchObject({ desired_generation: 3 });
    expect(after.status).not.toBe("realized");
    expect(after.agents).toEqual([
      expect.objectContaining({ name: "compute", status: expect.not.stringMatching(/^realized$/) }),
    ]);
  });
});

describe("the projection mark a heartbeat reads", () => {
  it("sees the mark written after it was read: the next heartbeat refreshes last_seen once the lease passed", async () => {
    const { s, stub } = await reportingServer(agents);
    const first = await lastSeen(s.id);
    // A heartbeat reads the mark (and keeps it): within the lease, the index is left alone.
    await new Promise((r) => setTimeout(r, 5));
    await call("PUT", "/v1/agent/inventory", { token: s.token, body: report(2, agents) });
    await settle(s.id);
    expect(await lastSeen(s.id)).toBe(first);
    // The mark moves (as the projection's delivery moves it): the last refresh a lease ago.
    await runInDurableObject(stub, (instance: ServerLedger) => {
      const store = storeOf(instance);
      const mark = store.projected()!;
      store.setProjected({ ...mark, last_seen_written: mark.last_seen_written! - INDEX_LEASE_MS });
    });
    await new Promise((r) => setTimeout(r, 5));
    await call("PUT", "/v1/agent/inventory", { token: s.token, body: report(2, agents) });
    await settle(s.id);
    expect(await lastSeen(s.id)).toBeGreaterThan(first);
  });

  it("reads no storage row for the mark it wrote itself outside a transaction, and the mark it reads is the one written", async () => {
    const { stub } = await reportingServer(agents);
    await runInDurableObject(stub, (instance: ServerLedger, state) => {
      const store = storeOf(instance);
      const mark: ProjectedMark = { ...structuredClone(store.projected()!), last_seen_written: 7 };
      const get = state.storage.kv.get.bind(state.storage.kv);
      let reads = 0;
      state.storage.kv.get = ((key: string) => (reads++, get(key))) as typeof state.storage.kv.get;
      store.setProjected(mark);
      expect(store.projected()).toEqual(mark);
      expect(reads).toBe(0);
      // What storage holds is what memory says.
      expect(get("projected")).toEqual(mark);
    });
  });

  it("keeps no memory of a mark written in a transaction that rolled back", async () => {
    const { stub } = await reportingServer(agents);
    await runInDurableObject(stub, (instance: ServerLedger) => {
      const store = storeOf(instance);
      const before: ProjectedMark = structuredClone(store.projected()!);
      expect(() =>
        store.transaction(() => {
          store.setProjected({ ...before, last_seen_written: 1 });
          // Read inside the transaction: it sees its own write, which must not outlive it.
          expect(store.projected()!.last_seen_written).toBe(1);
          throw new Error("rolled back");
        }),
      ).toThrow("rolled back");
      expect(store.projected()).toEqual(before);
    });
  });
});

describe("the rollout marks a changed report settles, kept in memory", () => {
  const mark = (rollout: string): RolloutMark => ({
    rollout_id: rollout,
    pass: 1,
    generation: 3,
    image: "compute:2",
    version: "2",
    from_image: "compute:1",
    from_version: "1",
  });
  const stored = (storage: DurableObjectStorage) => storage.kv.get("rollout_marks") ?? {};

  it("reads a mark written after the marks were read, and none once they are cleared", async () => {
    const { stub } = await reportingServer(agents);
    await runInDurableObject(stub, (instance: ServerLedger, state) => {
      const store = storeOf(instance);
      // Read before the write (the server's desired PUT left the operator's mark of its agent).
      expect(store.rolloutMarks()).toEqual(stored(state.storage));
      store.setRolloutMarks({ compute: mark("r-1") });
      expect(store.rolloutMarks()).toEqual({ compute: mark("r-1") });
      expect(stored(state.storage)).toEqual({ compute: mark("r-1") });
      store.setRolloutMarks({});
      expect(store.rolloutMarks()).toEqual({});
      expect(stored(state.storage)).toEqual({});
    });
  });

  it("keeps no memory of marks written in a transaction or savepoint that rolled back", async () => {
    const { stub } = await reportingServer(agents);
    await runInDurableObject(stub, (instance: ServerLedger, state) => {
      const store = storeOf(instance);
      store.setRolloutMarks({ compute: mark("r-1") });
      expect(() =>
        store.transaction(() => {
          store.setRolloutMarks({});
          // Inside the turn it sees its own write, which must not outlive it.
          expect(store.rolloutMarks()).toEqual({});
          throw new Error("rolled back");
        }),
      ).toThrow("rolled back");
      expect(store.rolloutMarks()).toEqual({ compute: mark("r-1") });
      // A savepoint rolled back inside a turn that commits: the outer write stands, the inner one not.
      store.transaction(() => {
        store.setRolloutMarks({ compute: mark("r-2") });
        try {
          store.transaction(() => {
            store.setRolloutMarks({ compute: mark("r-3") });
            throw new Error("inner rolled back");
          });
        } catch {
          // the outer turn goes on
        }
        expect(store.rolloutMarks()).toEqual({ compute: mark("r-2") });
      });
      expect(store.rolloutMarks()).toEqual({ compute: mark("r-2") });
      expect(stored(state.storage)).toEqual({ compute: mark("r-2") });
    });
  });

  it("does not hand out memory a caller can change behind storage's back", async () => {
    const { stub } = await reportingServer(agents);
    await runInDurableObject(stub, (instance: ServerLedger, state) => {
      const store = storeOf(instance);
      const written: Record<string, RolloutMark> = { compute: mark("r-1") };
      store.setRolloutMarks(written);
      written.vm = mark("r-2");
      expect(store.rolloutMarks()).toEqual({ compute: mark("r-1") });
      expect(() => Object.assign(store.rolloutMarks(), { vm: mark("r-2") })).toThrow();
      expect(stored(state.storage)).toEqual({ compute: mark("r-1") });
    });
  });
});
