/**
 * The ledger store's transactions: what a rolled-back turn leaves in memory, and which commit
 * hooks run. A savepoint (a transaction inside another) that throws rolls back only its own
 * writes; the outer turn may catch that and commit the rest.
 */
import { env, runInDurableObject } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import { LedgerStore } from "../src/ledger/store";
import type { DesiredState, ServerRecord } from "../src/model/server/record";
import type { StoredReport } from "../src/model/server/schemas";

const scratch = <T>(fn: (storage: DurableObjectStorage) => Promise<T> | T) =>
  runInDurableObject(env.LEDGER.get(env.LEDGER.idFromName(crypto.randomUUID())), (_i, state) => fn(state.storage));

// The store keeps what it is given: these stand-ins carry only what the tests look at.
const record = (hostname: string) => ({ id: "srv", hostname }) as unknown as ServerRecord;
const desired = { generation: 1 } as unknown as DesiredState;
const report = (at: number, generation = 1) =>
  ({ generation, boot_id: "b", agents: [], errors: [], assignments: null, received_at: at }) as unknown as StoredReport;
const fail = () => {
  throw new Error("simulated: a later statement of the turn failed");
};

describe("ledger store transactions", () => {
  it("runs no commit hook a rolled-back savepoint registered, even when the outer turn catches it and commits", async () => {
    await scratch((storage) => {
      const store = new LedgerStore(storage);
      const ran: string[] = [];
      store.transaction(() => {
        store.onCommit(() => ran.push("outer before"));
        try {
          store.transaction(() => {
            store.onCommit(() => ran.push("inner"));
            fail();
          });
        } catch {
          // The outer turn goes on without the inner one's writes.
        }
        store.transaction(() => store.onCommit(() => ran.push("inner committed")));
        store.onCommit(() => ran.push("outer after"));
        expect(ran).toEqual([]);
      });
      expect(ran).toEqual(["outer before", "inner committed", "outer after"]);
      expect(() =>
        store.transaction(() => {
          store.onCommit(() => ran.push("rolled back"));
          fail();
        }),
      ).toThrow("simulated");
      expect(ran).toHaveLength(3);
    });
  });

  it("leaves memory as storage is after a turn that saved and then threw, in a savepoint too", async () => {
    await scratch((storage) => {
      const store = new LedgerStore(storage);
      store.create(record("a"), desired);
      store.save({ report: report(1) });
      expect(() =>
        store.transaction(() => {
          store.save({ record: record("b"), report: report(2, 2) });
          expect(store.load()!.record.hostname).toBe("b");
          fail();
        }),
      ).toThrow("simulated");
      const after = store.load()!;
      expect([after.record.hostname, after.report!.generation, after.persistedAt]).toEqual(["a", 1, 1]);
      store.transaction(() => {
        store.save({ record: record("c") });
        try {
          store.transaction(() => {
            store.save({ record: record("d") });
            fail();
          });
        } catch {
          // caught: the outer turn commits "c"
        }
      });
      expect(store.load()!.record.hostname).toBe("c");
      // What a new instance reads from storage is what memory said.
      expect(new LedgerStore(storage).load()!.record.hostname).toBe("c");
    });
  });

  it("keeps a heartbeat held only in memory through a rolled-back turn, one heard before it and one heard in it", async () => {
    await scratch((storage) => {
      const store = new LedgerStore(storage);
      store.create(record("a"), desired);
      store.save({ report: report(1) });
      store.heartbeat(report(5));
      expect(() =>
        store.transaction(() => {
          store.save({ record: record("b") });
          fail();
        }),
      ).toThrow("simulated");
      expect([store.load()!.report!.received_at, store.load()!.heartbeatOnly]).toEqual([5, true]);
      expect(() =>
        store.transaction(() => {
          store.heartbeat(report(9));
          store.save({ record: record("b") });
          fail();
        }),
      ).toThrow("simulated");
      const after = store.load()!;
      expect([after.record.hostname, after.report!.received_at, after.heartbeatOnly, after.persistedAt]).toEqual([
        "a",
        9,
        true,
        1,
      ]);
    });
  });
});
