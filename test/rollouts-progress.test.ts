import {
  createExecutionContext,
  createScheduledController,
  env,
  evictDurableObject,
  runInDurableObject,
  waitOnExecutionContext,
} from "cloudflare:test";
import { eq } from "drizzle-orm";
import { describe, expect, it } from "vitest";
import { getDb } from "../src/db/client";
import { rollouts, rolloutTargets } from "../src/db/schema";
import worker from "../src/index";
import { call, fireTimersNow, settle } from "./helpers";
import {
  agePastDeadlines,
  AGENT,
  deadlineTimer,
  drain,
  fleetWithAgent,
  getRollout,
  hostReconcile,
  NEW,
  reconcileApplying,
  rolloutStub,
  startRollout,
  targets,
} from "./rollout-helpers";
import { sleep } from "./support/objects";
import { durationWords } from "../src/rollouts/progress";

const db = () => getDb(env.DB);

describe("progress, warnings and reads", () => {
  it("warns about a server slower than slow_factor x the median, when it ends and while it still applies", async () => {
    const { fleet, hosts } = await fleetWithAgent(4);
    const r = await startRollout({ fleet, concurrency: 4, slow_factor: 3 });
    // Two quick servers set the median; the third takes far longer; the fourth never answers.
    for (const h of hosts.slice(0, 2)) {
      await hostReconcile(h);
      await settle(h.id);
    }
    await drain(r.id);
    const median = (await getRollout(r.id)).median_s!;
    expect(median).toBeGreaterThan(0);
    await sleep(Math.max(400, median * 1000 * 4));
    await hostReconcile(hosts[2]);
    await settle(hosts[2].id);
    await drain(r.id);
    let s = await getRollout(r.id);
    // Warned once: while it applied (the real slow-check alarm may fire during the wait) or when it ended.
    const slow = s.warnings.filter((w) => w.server_id === hosts[2].id);
    expect(slow).toHaveLength(1);
    expect(slow[0].message).toMatch(/(took|has taken) .* over 3 x the median/);
    expect(s.warnings.map((w) => w.server_id)).not.toContain(hosts[0].id);
    expect(s.eta_s).not.toBeNull();
    // The fourth is still applying: the rollout's slow-check timer warns about it (the real alarm
    // may already have fired during the wait; firing it again warns once only). Only that timer:
    // the target's own deadline is an hour away.
    await fireTimersNow(rolloutStub(r.id), "slow");
    s = await getRollout(r.id);
    const still = s.warnings.filter((w) => w.server_id === hosts[3].id);
    expect(still).toHaveLength(1);
    expect(still[0].message).toMatch(/has taken .* over 3 x the median/);
    expect(s.state).toBe("running"); // a warning, not a failure
    const t = (await targets(r.id)).find((x) => x.server_id === hosts[3].id)!;
    expect(t.state).toBe("applying");
  });

  it("the median counts each done target once, also for the first target done after the object woke", async () => {
    const { fleet, hosts } = await fleetWithAgent(2);
    const r = await startRollout({ fleet, concurrency: 2 });
    await hostReconcile(hosts[0]);
    await settle(hosts[0].id);
    await drain(r.id);
    await sleep(300);
    // The durations of the pass are kept in memory: the next target is done in a fresh object.
    await evictDurableObject(rolloutStub(r.id));
    await hostReconcile(hosts[1]);
    await settle(hosts[1].id);
    await drain(r.id);
    const s = await getRollout(r.id);
    expect(s.state).toBe("succeeded");
    const items: { duration_s: number }[] = (await call("GET", `/v1/rollouts/${r.id}/targets`)).json.items;
    const [d0, d1] = items.map((t) => Math.round(t.duration_s * 1000)).sort((a, b) => a - b);
    expect(d1 - d0).toBeGreaterThanOrEqual(300);
    expect(s.median_s).toBe(Math.round((d0 + d1) / 2) / 1000);
  });

  it("?wait long-polls for the next change; events are paged; the index lists rollouts and their targets", async () => {
    const { fleet, hosts } = await fleetWithAgent(3);
    const r = await startRollout({ fleet, concurrency: 1 });
    const first = await getRollout(r.id);
    const [parked] = await Promise.all([
      call("GET", `/v1/rollouts/${r.id}?wait=20&since=${first.change}`),
      (async () => {
        await sleep(50);
        await reconcileApplying(r.id, hosts);
      })(),
    ]);
    expect(parked.status).toBe(200);
    expect(parked.json.change).toBeGreaterThan(first.change);
    for (let i = 0; i < 4; i++) await reconcileApplying(r.id, hosts);
    expect((await getRollout(r.id)).state).toBe("succeeded");

    const page1 = await call("GET", `/v1/rollouts/${r.id}/events?limit=2`);
    expect(page1.json.items.map((e: any) => e.kind)).toEqual(["rollout.running", "target.applying"]);
    const page2 = await call("GET", `/v1/rollouts/${r.id}/events?limit=100&cursor=${page1.json.next_cursor}`);
    expect(page2.json.items[0].id).toBeGreaterThan(page1.json.items[1].id);
    expect(page2.json.items.at(-1).kind).toBe("rollout.succeeded");
    const tp = await call("GET", `/v1/rollouts/${r.id}/targets?limit=2`);
    expect(tp.json.items).toHaveLength(2);
    const tp2 = await call("GET", `/v1/rollouts/${r.id}/targets?limit=2&cursor=${tp.json.next_cursor}`);
    expect(tp2.json.items).toHaveLength(1);
    expect(tp2.json.next_cursor).toBeNull();

    const list = await call("GET", `/v1/rollouts?fleet=${fleet}&agent=${AGENT}&state=succeeded`);
    expect(list.json.items.map((x: any) => x.id)).toEqual([r.id]);
    expect(list.json.items[0]).toMatchObject({ image: NEW, counts: { done: 3 } });
    expect((await call("GET", `/v1/rollouts?fleet=${fleet}&state=running`)).json.items).toHaveLength(0);
    const rows = await db().select().from(rolloutTargets).where(eq(rolloutTargets.rolloutId, r.id));
    expect(rows.map((x) => x.state)).toEqual(["done", "done", "done"]);
  });

  it("the cron re-drives a running rollout whose timers were lost", async () => {
    const { fleet } = await fleetWithAgent(2);
    const r = await startRollout({ fleet, concurrency: 2, server_timeout_s: 30 });
    const stub = rolloutStub(r.id);
    await runInDurableObject(stub, async (_i, state) => {
      state.storage.sql.exec("DELETE FROM _timers");
      await state.storage.deleteAlarm();
    });
    await db()
      .update(rollouts)
      .set({ updatedAt: Date.now() - 5 * 60_000 })
      .where(eq(rollouts.id, r.id));
    const ctx = createExecutionContext();
    await worker.scheduled(createScheduledController({ scheduledTime: Date.now(), cron: "* * * * *" }), env, ctx);
    await waitOnExecutionContext(ctx);
    expect(await deadlineTimer(r.id)).toBeGreaterThan(Date.now() + 25_000);
    await agePastDeadlines(r.id, 31_000);
    await fireTimersNow(stub);
    expect((await getRollout(r.id)).counts.timed_out).toBe(2);
  });
});

describe("durations in the slow-server warning", () => {
  it("says sub-second and few-second durations as they are, not as 0 s", () => {
    expect(durationWords(372)).toBe("372 ms");
    expect(durationWords(120)).toBe("120 ms");
    expect(durationWords(999.6)).toBe("1.0 s");
    expect(durationWords(9_960)).toBe("10 s");
    expect(durationWords(3_740)).toBe("3.7 s");
    expect(durationWords(42_400)).toBe("42 s");
    expect(durationWords(-5)).toBe("0 ms");
  });
});
