import { runInDurableObject } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import { OUTBOX_SAFETY_MS } from "../src/objects/kit/outbox";
import { fleetWithAgent, hostReconcile, startRollout, targets } from "./rollout-helpers";
import { ledger, until } from "./support/objects";

/** The ledger's alarm, its earliest timer and how many effects wait in its outbox. */
const alarmOf = (serverId: string) =>
  runInDurableObject(ledger(serverId), async (_i, state) => {
    const table = (t: string) =>
      state.storage.sql.exec("SELECT 1 FROM sqlite_master WHERE name = ?", t).toArray().length > 0;
    return {
      alarm: await state.storage.getAlarm(),
      earliest: table("_timers")
        ? state.storage.sql.exec<{ at: number | null }>("SELECT MIN(due_at) AS at FROM _timers").one().at
        : null,
      pending: table("_outbox")
        ? state.storage.sql.exec<{ n: number }>("SELECT COUNT(*) AS n FROM _outbox").one().n
        : 0,
    };
  });

describe("what a rollout target costs its ledger", () => {
  it("takes back the write's safety alarm once the host's report delivered everything", async () => {
    const { fleet, hosts } = await fleetWithAgent(1);
    const [h] = hosts;
    // A running fleet: the ledger's alarm is its quiet watch's, minutes away.
    const settled = async () => {
      const { alarm, earliest, pending } = await alarmOf(h.id);
      return pending === 0 && alarm !== null && alarm === earliest && alarm > Date.now() + 60_000;
    };
    await until(settled);
    const r = await startRollout({ fleet, concurrency: 1 });
    expect((await targets(r.id))[0].state).toBe("applying");
    // The write left its projection and audit row to the host's report: the safety alarm is near.
    const written = await alarmOf(h.id);
    expect(written.pending).toBeGreaterThan(0);
    expect(written.alarm).not.toBeNull();
    expect(written.alarm!).toBeLessThanOrEqual(Date.now() + OUTBOX_SAFETY_MS);
    expect(written.alarm!).toBeGreaterThan(Date.now());

    await hostReconcile(h);
    // The report's delivery runs after its answer; once it has delivered everything, the alarm is
    // the ledger's next timer again, not a wake that would find nothing due.
    await until(settled, 3_000);
  });
});
