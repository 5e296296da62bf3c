/**
 * The quiet watch (src/ledger/quiet.ts): a host reporting over HTTP costs D1 one write a lease,
 * and when it goes quiet the ledger's own alarm gives the index its exact stale_at.
 */
import { runDurableObjectAlarm, runInDurableObject } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import type { ServerLedger } from "../src/ledger/durable-object";
import { INDEX_LEASE_MS } from "../src/ledger/projection";
import { QUIET_TIMER, quietGraceMs } from "../src/ledger/quiet";
import { LATE_DEADLINE_MS } from "../src/webhooks/stale";
import { call, createFleet, d1Statements, registerServer, report, settle } from "./helpers";
import { indexRow, ledger } from "./support/objects";

const quietDue = (id: string) =>
  runInDurableObject(
    ledger(id),
    (_i: ServerLedger, state) =>
      state.storage.sql.exec<{ due_at: number }>("SELECT due_at FROM _timers WHERE name = ?", QUIET_TIMER).toArray()[0]
        ?.due_at ?? null,
  );
const listed = async (fleet: string, id: string) =>
  (await call("GET", `/v1/servers?fleet=${fleet}`)).json.items.find((x: { id: string }) => x.id === id)?.status;

/** Makes the quiet timer due now; `reportedAgoMs`: the stored report's received_at is moved that far back. */
async function fireQuiet(id: string, reportedAgoMs?: number) {
  await runInDurableObject(ledger(id), async (instance: ServerLedger, state) => {
    if (reportedAgoMs !== undefined) {
      const store = (instance as unknown as { parts: { store: { load(): any; save(p: unknown): void } } }).parts.store;
      const { report: stored } = store.load();
      store.save({ report: { ...stored, received_at: Date.now() - reportedAgoMs } });
    }
    state.storage.sql.exec("UPDATE _timers SET due_at = ? WHERE name = ?", Date.now() - 1, QUIET_TIMER);
    await state.storage.setAlarm(Date.now() - 1);
  });
  await runDurableObjectAlarm(ledger(id));
}

describe("the quiet watch over an HTTP host", () => {
  it("writes a quiet host's stale_at at most as late as the server.stale sweep looks back, whatever stale_after", () => {
    expect(quietGraceMs(300)).toBe(300_000);
    for (const staleAfterS of [10, 300, 3600, 7 * 86400])
      expect(quietGraceMs(staleAfterS)).toBeLessThan(LATE_DEADLINE_MS);
  });

  it("leases the index row from the first report and sets one timer, due when the host would be stale (plus the grace)", async () => {
    const fleet = await createFleet({ stale_after_s: 120 });
    const s = await registerServer(fleet.id);
    await call("PUT", "/v1/agent/inventory", { token: s.token, body: report(1, []) });
    await settle(s.id);
    const row = (await indexRow(s.id))!;
    expect(row.stale_at).toBe(row.last_seen + 120_000 + INDEX_LEASE_MS);
    expect(await quietDue(s.id)).toBe(row.last_seen + 120_000 + quietGraceMs(120));
  });

  it("watches a host that keeps reporting from its newest heartbeat, with no D1 write", async () => {
    const fleet = await createFleet({ stale_after_s: 120 });
    const s = await registerServer(fleet.id);
    await call("PUT", "/v1/agent/inventory", { token: s.token, body: report(1, []) });
    await settle(s.id);
    const before = await d1Statements();
    await fireQuiet(s.id);
    expect((await d1Statements()).writes).toBe(before.writes);
    expect(await quietDue(s.id)).toBeGreaterThan(Date.now() + 120_000);
    expect(await listed(fleet.id, s.id)).not.toBe("stale");
  });

  it("tells the index a host went quiet with its exact stale_at, and the host's next report leases the row again", async () => {
    const fleet = await createFleet({ stale_after_s: 120 });
    const s = await registerServer(fleet.id);
    await call("PUT", "/v1/agent/inventory", { token: s.token, body: report(1, []) });
    await settle(s.id);
    const silentFor = 120_000 + quietGraceMs(120) + 1_000;
    await fireQuiet(s.id, silentFor);
    const quiet = (await indexRow(s.id))!;
    expect(quiet.stale_at).toBe(quiet.last_seen + 120_000);
    expect(quiet.stale_at).toBeLessThan(Date.now());
    expect(await listed(fleet.id, s.id)).toBe("stale");
    expect(await quietDue(s.id)).toBeNull();

    await call("PUT", "/v1/agent/inventory", { token: s.token, body: report(1, []) });
    await settle(s.id);
    const back = (await indexRow(s.id))!;
    expect(back.stale_at).toBe(back.last_seen + 120_000 + INDEX_LEASE_MS);
    expect(await listed(fleet.id, s.id)).not.toBe("stale");
    expect(await quietDue(s.id)).not.toBeNull();
  });
});
