import { env, runInDurableObject } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import { ROLLOUT_WRITE_DEFER_MS } from "../src/ledger/rollout-marks";
import { OUTBOX_SAFETY_MS } from "../src/objects/kit/outbox";
import { RolloutInput } from "../src/rollouts/schemas";
import { createRollout } from "../src/rollouts/service";
import { call, fireTimersNow } from "./helpers";
import {
  AGENT,
  drain,
  fleetWithAgent,
  holdLedgerWrites,
  hostReconcile,
  NEW,
  startRollout,
  targets,
} from "./rollout-helpers";
import { ledger, sleep, until } from "./support/objects";

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

/** Nothing left to deliver, and the alarm set for the ledger's next timer (its quiet watch's, minutes away). */
async function quietAlarm(serverId: string) {
  const { alarm, earliest, pending } = await alarmOf(serverId);
  return pending === 0 && alarm !== null && alarm === earliest && alarm > Date.now() + 60_000;
}

/** Counts from now on the `setAlarm` calls of the server's ledger (each billed as a row written). */
async function countAlarmsSet(serverId: string) {
  let n = 0;
  await runInDurableObject(ledger(serverId), (_i, state) => {
    const setAlarm = state.storage.setAlarm.bind(state.storage);
    state.storage.setAlarm = ((...args: Parameters<typeof setAlarm>) => {
      n++;
      return setAlarm(...args);
    }) as typeof setAlarm;
  });
  return () => n;
}

describe("what a rollout target costs its ledger", () => {
  it("sets the ledger's alarm twice for a write and its report: for the write's rows, then back to its next timer", async () => {
    const { fleet, hosts } = await fleetWithAgent(1);
    const [h] = hosts;
    await until(() => quietAlarm(h.id));
    const alarmsSet = await countAlarmsSet(h.id);
    await startRollout({ fleet, concurrency: 1 });
    expect(alarmsSet()).toBe(1);
    const held = (await alarmOf(h.id)).alarm;
    // The report's effects (due in 10 s) leave the write's alarm where it is: its own flush
    // delivers them, and a crash before it leaves them to that alarm, within a minute of the write.
    await hostReconcile(h);
    await until(() => quietAlarm(h.id), 3_000);
    expect(alarmsSet()).toBe(2);
    expect(held).not.toBeNull();
  });

  it("takes back the write's safety alarm once the host's report delivered everything", async () => {
    const { fleet, hosts } = await fleetWithAgent(1);
    const [h] = hosts;
    // A running fleet: the ledger's alarm is its quiet watch's, minutes away.
    const settled = () => quietAlarm(h.id);
    await until(settled);
    const r = await startRollout({ fleet, concurrency: 1 });
    expect((await targets(r.id))[0].state).toBe("applying");
    // The write left its projection and audit row to the host's report: the safety alarm is set
    // for when they go alone, later than the outbox's usual 10 s (a loaded host reports later).
    const written = await alarmOf(h.id);
    expect(written.pending).toBeGreaterThan(0);
    expect(written.alarm).not.toBeNull();
    expect(written.alarm!).toBeLessThanOrEqual(Date.now() + ROLLOUT_WRITE_DEFER_MS);
    expect(written.alarm!).toBeGreaterThan(Date.now() + OUTBOX_SAFETY_MS);

    await hostReconcile(h);
    // The report's delivery runs after its answer; once it has delivered everything, the alarm is
    // the ledger's next timer again, not a wake that would find nothing due.
    await until(settled, 3_000);
  });
});

const auditRows = async (serverId: string) =>
  (await env.DB.prepare("SELECT COUNT(*) AS n FROM audit_log WHERE target = ? AND action = 'server.desired.rollout'")
    .bind(`server:${serverId}`)
    .first<{ n: number }>())!.n;

describe("a rollout write whose host never reports", () => {
  it("reaches the index and the audit log by the ledger's alarm alone", async () => {
    const { fleet, hosts } = await fleetWithAgent(1);
    const [h] = hosts;
    await until(() => quietAlarm(h.id));
    await startRollout({ fleet, concurrency: 1 });
    const [t] = await targets((await call("GET", `/v1/rollouts?fleet=${fleet}`)).json.items[0].id);
    expect(t.generation).toBe(3);
    expect(await auditRows(h.id)).toBe(0);
    expect((await call("GET", `/v1/servers?fleet=${fleet}`)).json.items[0].desired_generation).toBe(2);
    // No report comes (the host died, or the ledger was evicted): the alarm, set with the write,
    // delivers the rows.
    expect((await alarmOf(h.id)).alarm!).toBeLessThanOrEqual(Date.now() + ROLLOUT_WRITE_DEFER_MS);
    expect(await fireTimersNow(ledger(h.id), "outbox")).toBe(true);
    expect(await auditRows(h.id)).toBe(1);
    expect((await call("GET", `/v1/servers?fleet=${fleet}`)).json.items[0].desired_generation).toBe(3);
  });
});

describe("starting a rollout", () => {
  it("answers once the rollout is stored, without waiting for its first ledger writes", async () => {
    const { fleet } = await fleetWithAgent(3);
    const id = crypto.randomUUID();
    const ledgers = await holdLedgerWrites(id);
    const input = RolloutInput.parse({ fleet, agent: AGENT, image: NEW, version: "2.0.0", concurrency: 2 });
    const started = createRollout(env, "token:test", input, () => id);
    try {
      const answer = await Promise.race([started, sleep(5_000).then(() => null)]);
      // With the ledgers held, a start that waited for their writes would not have answered.
      expect(answer).not.toBeNull();
      expect(answer!.id).toBe(id);
      expect(answer!.counts).toMatchObject({ queued: 1, applying: 2 });
      expect(ledgers.calls.landed).toBe(0);
    } finally {
      ledgers.release();
      await started;
    }
    // The rollout is listed at once, its targets applying; their writes follow from its outbox.
    expect((await call("GET", `/v1/rollouts/${id}`)).json.counts).toMatchObject({ applying: 2 });
    // The held writes go on once released, not necessarily within the drain's own flushes.
    await until(async () => {
      await drain(id);
      return (await targets(id, "?state=applying")).every((t) => t.generation !== null);
    });
    expect(ledgers.calls.landed).toBe(2);
    const written = await targets(id, "?state=applying");
    expect(written.map((t) => t.generation)).toEqual([3, 3]);
    for (const t of written) {
      const s = await call("GET", `/v1/servers/${t.server_id}`);
      expect(s.json.desired.agents.find((a: { name: string }) => a.name === AGENT).image).toBe(NEW);
    }
  });
});
