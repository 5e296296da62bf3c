import { runInDurableObject } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import type { ServerLedger } from "../src/ledger/durable-object";
import type { LedgerStore } from "../src/ledger/store";
import { call, createFleet, registerServer, report, settle } from "./helpers";
import { ledger } from "./support/objects";

// The ledger answers from memory what storage holds (its record, desired config and report, the
// refresh state). A transaction that throws rolls storage back; the memory must go back with it,
// or the ledger goes on answering hosts, pages and the projection with writes that never happened.

const agents = [{ name: "compute", image: "compute:1", version: "1" }];

const storeOf = (instance: ServerLedger) => (instance as unknown as { parts: { store: LedgerStore } }).parts.store;

describe("the ledger's memory after a transaction that rolled back", () => {
  it("answers the desired config, report and refresh state storage holds, not the ones the transaction wrote", async () => {
    const fleet = await createFleet();
    const s = await registerServer(fleet.id);
    await call("PUT", `/v1/servers/${s.id}/desired`, { body: { generation: 2, agents } });
    expect((await call("PUT", "/v1/agent/inventory", { token: s.token, body: report(2, agents) })).status).toBe(200);
    await settle(s.id);
    await runInDurableObject(ledger(s.id), (instance: ServerLedger) => {
      const store = storeOf(instance);
      const before = structuredClone(store.load()!);
      const refreshBefore = store.refresh();
      expect(() =>
        store.transaction(() => {
          store.save({
            desired: { ...before.desired, generation: 99 },
            report: { ...before.report!, boot_id: "never-stored", received_at: 1 },
          });
          store.setRefresh({ requested_at: 1, requested_by: "nobody", answered_at: null });
          throw new Error("rolled back");
        }),
      ).toThrow("rolled back");
      const after = store.load()!;
      expect(after.desired.generation).toBe(2);
      expect(after.report!.boot_id).toBe(before.report!.boot_id);
      expect(after.reportKey).toBe(before.reportKey);
      expect(store.refresh()).toEqual(refreshBefore);
    });
    // And through the API: the server still shows generation 2.
    expect((await call("GET", `/v1/servers/${s.id}`)).json).toMatchObject({ desired_generation: 2 });
  });
});
