/**
 * Every event in the webhook list is sent, from its owner, once per change, to the webhooks that
 * asked for it and to no other: servers registered and removed (any server), rollouts' transitions
 * (the Rollout's outbox), servers going stale (the cron's sweep over stale_at) and data upgrade
 * steps (their history rows, delivered by the cron).
 */
import { env, runInDurableObject } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import { runUpgrades } from "../src/upgrades/runner";
import { newestVersion } from "../src/upgrades/step";
import { UPGRADE_STEPS } from "../src/upgrades/steps";
import { sendUpgradeEvents } from "../src/upgrades/notices";
import { STALE_CURSOR } from "../src/webhooks/stale";
import type { FleetEvent } from "../src/webhooks/events";
import { call, createFleet, fireTimersNow, registerServer, report, settle } from "./helpers";
import {
  drain,
  fleetWithAgent,
  getRollout,
  hostReconcile,
  reconcileApplying,
  rolloutStub,
  startRollout,
  targets,
} from "./rollout-helpers";
import { probeStep, probeTable } from "./upgrades-helpers";
import { bodiesOf, hook, receivedBy, receiver } from "./webhook-helpers";
import { coordinator, ledger, scheduledRun } from "./support/objects";

describe("webhook events from every owner", () => {
  it("sends server.registered and server.decommissioned for a manual server without a FleetLock id, once each, only to the webhook that asked", async () => {
    const f = await createFleet();
    const wants = await hook(f.id, "servers", ["server.registered", "server.decommissioned"]);
    const other = await hook(f.id, "reboots", ["reboot.granted", "server.failed"]);
    const sent = await receiver(f.id);

    const s = await registerServer(f.id, { kind: "manual" });
    await settle(s.id);
    expect(
      (await call("POST", `/v1/servers/${s.id}/decommission`, { body: { force: true, reason: "gone" } })).status,
    ).toBe(200);
    for (let i = 0; i < 3; i++) await fireTimersNow(ledger(s.id));
    await fireTimersNow(coordinator(f.id));

    expect(receivedBy(sent, wants)).toEqual(["server.registered", "server.decommissioned"]);
    expect(receivedBy(sent, other)).toEqual([]);
    const [registered, removed] = bodiesOf(sent, wants);
    expect(registered).toMatchObject({
      subject: `server:${s.id}`,
      data: { server_id: s.id, kind: "manual", fleetlock_id: null },
    });
    expect(removed).toMatchObject({ subject: `server:${s.id}`, data: { server_id: s.id, forced: { reason: "gone" } } });

    // The ledger's outbox delivers at least once: the same event again is dropped by its id.
    await runInDurableObject(coordinator(f.id), async (instance) => {
      await (instance as unknown as { fleetEvents(e: FleetEvent[]): Promise<void> }).fleetEvents([
        {
          id: `server.registered:${s.id}`,
          type: "server.registered",
          fleet: f.id,
          time: Date.now(),
          subject: `server:${s.id}`,
          summary: "again",
          data: {},
        },
      ]);
    });
    await fireTimersNow(coordinator(f.id));
    expect(receivedBy(sent, wants)).toHaveLength(2);
  });

  it("sends a rollout's started, paused, resumed and succeeded from the Rollout object, once each, and cancelled to the webhook that asked for it", async () => {
    const { fleet, hosts } = await fleetWithAgent(2);
    const life = await hook(fleet, "life", [
      "rollout.started",
      "rollout.paused",
      "rollout.resumed",
      "rollout.succeeded",
    ]);
    const ends = await hook(fleet, "ends", ["rollout.cancelled", "rollout.failed"]);
    const sent = await receiver(fleet);

    const r = await startRollout({ fleet, concurrency: 1 });
    expect((await call("POST", `/v1/rollouts/${r.id}/pause`)).status).toBe(200);
    expect((await call("POST", `/v1/rollouts/${r.id}/resume`)).status).toBe(200);
    for (let i = 0; i < 4 && (await reconcileApplying(r.id, hosts)) > 0; i++);
    await drain(r.id);
    await fireTimersNow(coordinator(fleet));
    expect(receivedBy(sent, life)).toEqual([
      "rollout.started",
      "rollout.paused",
      "rollout.resumed",
      "rollout.succeeded",
    ]);
    expect(receivedBy(sent, ends)).toEqual([]);
    expect(bodiesOf(sent, life)[3]).toMatchObject({
      subject: `rollout:${r.id}`,
      data: { rollout_id: r.id, state: "succeeded", version: "2.0.0" },
    });

    const second = await call("POST", "/v1/rollouts", {
      body: { fleet, agent: "fw-agent", image: "registry.example/fw:3.0.0", version: "3.0.0", concurrency: 1 },
    });
    expect((await call("POST", `/v1/rollouts/${second.json.id}/cancel`)).status).toBe(200);
    await drain(second.json.id);
    await fireTimersNow(coordinator(fleet));
    expect(receivedBy(sent, ends)).toEqual(["rollout.cancelled"]);
    expect(receivedBy(sent, life)).toHaveLength(5);
  });

  it("sends rollout.failed when the abort rule fails it, and rollout.slow_server once per slow target, only to the webhooks that asked", async () => {
    const { fleet, hosts } = await fleetWithAgent(3);
    const failedHook = await hook(fleet, "failed", ["rollout.failed"]);
    const slowHook = await hook(fleet, "slow", ["rollout.slow_server"]);
    const sent = await receiver(fleet);

    // Slow: two quick targets set the median, the third has taken far longer when its timer checks.
    const r = await startRollout({ fleet, concurrency: 3, slow_factor: 3 });
    const applying = (await targets(r.id, "?state=applying")).map((t) => hosts.find((h) => h.id === t.server_id)!);
    for (const h of applying.slice(0, 2)) {
      await hostReconcile(h);
      await settle(h.id);
    }
    await drain(r.id);
    const median = (await getRollout(r.id)).median_s!;
    await new Promise((res) => setTimeout(res, Math.max(400, median * 1000 * 4)));
    await fireTimersNow(rolloutStub(r.id), "slow");
    await fireTimersNow(rolloutStub(r.id), "slow");
    await drain(r.id);
    await fireTimersNow(coordinator(fleet));
    expect(receivedBy(sent, slowHook)).toEqual(["rollout.slow_server"]);
    expect(bodiesOf(sent, slowHook)[0]).toMatchObject({ data: { rollout_id: r.id, server_id: applying[2].id } });
    expect(receivedBy(sent, failedHook)).toEqual([]);
    expect((await call("POST", `/v1/rollouts/${r.id}/cancel`)).status).toBe(200);

    // Failed: its abort rule (no failure allowed) ends it at the first failure.
    await hostReconcile(applying[2]);
    await settle(applying[2].id);
    const second = await startRollout({
      fleet,
      image: "registry.example/fw:3.0.0",
      version: "3.0.0",
      concurrency: 1,
      abort: { max_failures: 0 },
    });
    const [first] = (await targets(second.id, "?state=applying")).map((t) => hosts.find((h) => h.id === t.server_id)!);
    await hostReconcile(first, { fail: true });
    await settle(first.id);
    expect((await getRollout(second.id)).state).toBe("failed");
    await drain(second.id);
    await fireTimersNow(coordinator(fleet));
    expect(receivedBy(sent, failedHook)).toEqual(["rollout.failed"]);
    expect(bodiesOf(sent, failedHook)[0]).toMatchObject({
      subject: `rollout:${second.id}`,
      data: { state: "failed", reason: expect.stringMatching(/max_failures 0/) },
    });
    expect(receivedBy(sent, slowHook)).toEqual(["rollout.slow_server"]);
  });

  it("sends server.stale once when a server's stale_at passes, from the cron's sweep of what crossed since its last tick", async () => {
    const f = await createFleet();
    const wants = await hook(f.id, "stale", ["server.stale"]);
    const other = await hook(f.id, "failed", ["server.failed", "server.drifted"]);
    const s = await registerServer(f.id);
    expect((await call("PUT", "/v1/agent/inventory", { token: s.token, body: report(1, []) })).status).toBe(200);
    await settle(s.id);
    const sent = await receiver(f.id);
    // The host went quiet: its deadline (kept by its ledger's projection) passed a moment ago.
    const staleAt = Date.now() - 1000;
    await env.DB.prepare("UPDATE servers SET stale_at = ? WHERE id = ?").bind(staleAt, s.id).run();
    await env.DB.prepare(
      "INSERT INTO cron_cursors (name, at) VALUES (?, ?) ON CONFLICT(name) DO UPDATE SET at = excluded.at",
    )
      .bind(STALE_CURSOR, staleAt - 5000)
      .run();

    await scheduledRun();
    await fireTimersNow(coordinator(f.id));
    expect(receivedBy(sent, wants)).toEqual(["server.stale"]);
    expect(bodiesOf(sent, wants)[0]).toMatchObject({
      subject: `server:${s.id}`,
      data: { server_id: s.id, stale_at: new Date(staleAt).toISOString() },
    });
    expect(receivedBy(sent, other)).toEqual([]);

    // The next tick reads from where this one stopped; a tick repeated over the same span (its
    // cursor never moved) sends nothing twice either.
    await scheduledRun();
    await env.DB.prepare("UPDATE cron_cursors SET at = ? WHERE name = ?")
      .bind(staleAt - 5000, STALE_CURSOR)
      .run();
    await scheduledRun();
    await fireTimersNow(coordinator(f.id));
    expect(receivedBy(sent, wants)).toHaveLength(1);

    // A deadline that reaches the index after it passed, and after the sweep moved on (a ledger
    // that writes the exact stale_at once it saw its host go quiet): the next tick still sends it.
    const late = await registerServer(f.id);
    expect((await call("PUT", "/v1/agent/inventory", { token: late.token, body: report(1, []) })).status).toBe(200);
    await settle(late.id);
    await scheduledRun();
    const lateAt = Date.now() - 90_000;
    await env.DB.prepare("UPDATE servers SET stale_at = ?, updated_at = ? WHERE id = ?")
      .bind(lateAt, Date.now(), late.id)
      .run();
    await scheduledRun();
    await scheduledRun();
    await fireTimersNow(coordinator(f.id));
    expect(receivedBy(sent, wants)).toEqual(["server.stale", "server.stale"]);
    expect(bodiesOf(sent, wants)[1]).toMatchObject({
      data: { server_id: late.id, stale_at: new Date(lateAt).toISOString() },
    });
  });

  it("sends upgrade.step_applied and step_failed to every fleet's webhooks that want them, from the step's history row, once", async () => {
    await probeTable();
    const a = await createFleet();
    const b = await createFleet();
    const applied = await hook(a.id, "applied", ["upgrade.step_applied"]);
    const failed = await hook(b.id, "failed", ["upgrade.step_failed"]);
    const neither = await hook(b.id, "neither", ["server.stale"]);
    const sentA = await receiver(a.id);
    const sentB = await receiver(b.id);
    // Events owed before this test (other tests' runs) are sent first and not counted.
    await sendUpgradeEvents(env, Date.now());
    sentA.length = 0;
    sentB.length = 0;

    const next = newestVersion(UPGRADE_STEPS) + 1;
    let fail = true;
    const steps = [...UPGRADE_STEPS, probeStep(next, { failAtChunk: () => (fail ? 1 : null) })];
    expect(await runUpgrades(env, { trigger: "operator", steps })).toMatchObject({ outcome: "failed" });
    fail = false;
    expect(await runUpgrades(env, { trigger: "operator", steps })).toMatchObject({ outcome: "applied" });
    // The runner only writes the history; a crash here loses nothing: the rows are the outbox.
    await sendUpgradeEvents(env, Date.now());
    await sendUpgradeEvents(env, Date.now());
    await fireTimersNow(coordinator(a.id));
    await fireTimersNow(coordinator(b.id));

    expect(receivedBy(sentA, applied)).toEqual(["upgrade.step_applied"]);
    expect(receivedBy(sentB, failed)).toEqual(["upgrade.step_failed"]);
    expect(receivedBy(sentB, neither)).toEqual([]);
    expect(bodiesOf(sentA, applied)[0]).toMatchObject({ subject: `upgrade:${next}`, data: { version: next } });
    // Marked: nothing is owed any more.
    const owed = await env.DB.prepare(
      "SELECT COUNT(*) AS n FROM upgrade_steps WHERE notified_at IS NULL AND state != 'running'",
    ).first<number>("n");
    expect(owed).toBe(0);
    await env.DB.prepare("UPDATE upgrade_state SET version = ? WHERE id = 1")
      .bind(next - 1)
      .run();
  });

  it("sends upgrade.step_failed once for a step the cron retries every minute failing the same way, and again when its error changes", async () => {
    await probeTable();
    const f = await createFleet();
    const failed = await hook(f.id, "failed", ["upgrade.step_failed"]);
    const sent = await receiver(f.id);
    await sendUpgradeEvents(env, Date.now());

    const next = newestVersion(UPGRADE_STEPS) + 1;
    let failAt: number | null = 1;
    const steps = [...UPGRADE_STEPS, probeStep(next, { chunks: 2, failAtChunk: () => failAt })];
    const tick = async () => {
      expect(await runUpgrades(env, { trigger: "cron", steps })).toMatchObject({ outcome: "failed" });
      await sendUpgradeEvents(env, Date.now());
    };
    for (let i = 0; i < 3; i++) await tick();
    // Its first chunk goes through now, and the second breaks: another error, another event.
    failAt = 2;
    for (let i = 0; i < 2; i++) await tick();
    await fireTimersNow(coordinator(f.id));
    expect(receivedBy(sent, failed)).toEqual(["upgrade.step_failed", "upgrade.step_failed"]);
    expect(bodiesOf(sent, failed).map((b) => b.data.error)).toEqual([
      `probe step ${next} broke at chunk 1`,
      `probe step ${next} broke at chunk 2`,
    ]);
    failAt = null;
    expect(await runUpgrades(env, { trigger: "cron", steps })).toMatchObject({ outcome: "applied" });
    await env.DB.prepare("UPDATE upgrade_state SET version = ? WHERE id = 1")
      .bind(next - 1)
      .run();
  });
});
