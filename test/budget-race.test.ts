import { env, runInDurableObject } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import { call, settle } from "./helpers";
import { fleetWithKey, flushCoordinator, getGroup, putGroup, until, zincati } from "./fleetlock-helpers";
import {
  drain,
  getRollout,
  hostReconcile,
  reconcileApplying,
  startRollout,
  targets,
  type Host,
} from "./rollout-helpers";

const ZONES = ["z1", "z2", "z3", "z4"];

/** The reasons a rollout's object keeps for its waiting targets (`blocked:<pass>:<server>`). */
const blockedKeys = (rolloutId: string) =>
  runInDurableObject(env.ROLLOUT.get(env.ROLLOUT.idFromName(rolloutId)), (_i, state) =>
    [...state.storage.kv.list({ prefix: "blocked:" })].map(([k]) => k),
  );

interface ZonedHost extends Host {
  zone: string;
  fleetlockId: string;
}

/** `perZone` servers in each zone, each running the agent at its old image, labelled with its zone. */
async function zonedFleet(fleet: string, perZone: number) {
  const hosts: ZonedHost[] = [];
  for (const zone of ZONES)
    for (let i = 0; i < perZone; i++) {
      const tag = Math.random().toString(36).slice(2, 7);
      const hostname = `${zone}-${i}-${tag}.example.com`;
      const fleetlockId = `${zone}-${i}-${tag}`;
      const s = await call("POST", "/v1/servers", {
        body: { fleet, hostname, kind: "managed", fleetlock_id: fleetlockId, labels: { zone } },
      });
      if (s.status !== 201) throw new Error(`register: ${s.status} ${JSON.stringify(s.json)}`);
      await call("PUT", `/v1/servers/${s.json.id}/desired`, {
        body: { generation: 2, agents: [{ name: "fw-agent", image: "registry.example/fw:1.0.0", version: "1.0.0" }] },
      });
      const h = { id: s.json.id, token: s.json.token, hostname, zone, fleetlockId };
      await hostReconcile(h);
      await settle(h.id);
      hosts.push(h);
    }
  return hosts;
}

/**
 * A fleet of one server per zone with a budget of one unit, already taken: the first host holds a
 * reboot slot (two slots, so the budget and not the slots refuses the next).
 */
async function budgetTakenByReboot() {
  const f = await fleetWithKey();
  await putGroup(f.fleet, "default", { slots: 2 });
  await call("PATCH", `/v1/fleets/${f.fleet}`, {
    body: { disruption_budget: { max_unavailable: 1, per_label: {} } },
  });
  const hosts = await zonedFleet(f.fleet, 1);
  expect((await zincati(f.baseUrl, "pre-reboot", hosts[0].fleetlockId)).status).toBe(200);
  return { f, hosts };
}

/** Servers disrupted now, as the API shows them: reboot-slot holders and applying rollout targets. */
async function disruptedByZone(fleet: string, rolloutId: string, hosts: ZonedHost[]) {
  const zoneOf = new Map(hosts.map((h) => [h.id, h.zone]));
  const ids = new Set<string>();
  for (const h of (await getGroup(fleet, "default")).holders) if (h.server) ids.add(h.server.id);
  for (const t of await targets(rolloutId, "?state=applying")) ids.add(t.server_id);
  const perZone: Record<string, string[]> = {};
  for (const id of ids) (perZone[zoneOf.get(id)!] ??= []).push(id);
  return perZone;
}

/** Replays the coordinator's audit rows in order: the most servers of one zone disrupted at once. */
async function auditMaxPerZone(fleet: string, hosts: ZonedHost[]) {
  const zoneOf = new Map(hosts.map((h) => [h.id, h.zone]));
  const rows = await env.DB.prepare(
    `SELECT action, details FROM audit_log WHERE target = ? AND action IN
       ('fleetlock.grant', 'fleetlock.release', 'fleetlock.release_server', 'disruption.take', 'disruption.release')
     ORDER BY id`,
  )
    .bind(`fleet:${fleet}`)
    .all<{ action: string; details: string }>();
  const held = new Map<string, number>();
  let max = 0;
  let takes = 0;
  for (const r of rows.results) {
    const d = JSON.parse(r.details) as { server_id: string };
    const n = held.get(d.server_id) ?? 0;
    if (r.action === "fleetlock.grant" || r.action === "disruption.take") {
      held.set(d.server_id, n + 1);
      takes++;
    } else held.set(d.server_id, Math.max(0, n - 1));
    const perZone = new Map<string, number>();
    for (const [id, k] of held) if (k > 0) perZone.set(zoneOf.get(id)!, (perZone.get(zoneOf.get(id)!) ?? 0) + 1);
    max = Math.max(max, ...perZone.values(), 0);
  }
  return { max, takes };
}

describe("one disruption budget for reboots and rollouts", () => {
  it("a rollout and a reboot wave together with per_label zone 1 never disrupt two servers of a zone, and both finish", async () => {
    const f = await fleetWithKey();
    await putGroup(f.fleet, "default", { slots: 4 });
    const patched = await call("PATCH", `/v1/fleets/${f.fleet}`, {
      body: { disruption_budget: { per_label: { zone: 1 } } },
    });
    expect(patched.status).toBe(200);
    expect(patched.json.disruption_budget).toEqual({ max_unavailable: null, per_label: { zone: 1 } });
    const hosts = await zonedFleet(f.fleet, 3);
    const r = await startRollout({ fleet: f.fleet, concurrency: 4 });

    const rebooted = new Set<string>();
    const holding = new Set<string>();
    let samples = 0;
    let maxSeen = 0;
    let budgetRefusals = 0;
    let waitedForBudget = 0;
    const sample = async () => {
      const perZone = await disruptedByZone(f.fleet, r.id, hosts);
      for (const ids of Object.values(perZone)) maxSeen = Math.max(maxSeen, ids.length);
      samples++;
    };
    for (let round = 0; round < 40; round++) {
      const state = (await getRollout(r.id)).state;
      if (state !== "running" && rebooted.size === hosts.length) break;
      // The reboot wave: every host not yet rebooted asks, all at once, as Zincati does.
      const asking = hosts.filter((h) => !rebooted.has(h.id) && !holding.has(h.id));
      const answers = await Promise.all(asking.map((h) => zincati(f.baseUrl, "pre-reboot", h.fleetlockId)));
      answers.forEach((a, i) => {
        if (a.status === 200) holding.add(asking[i].id);
        else if (a.json.kind === "budget_exhausted") budgetRefusals++;
      });
      await sample();
      waitedForBudget += (await targets(r.id, "?state=waiting_budget")).length;
      // The rollout's hosts reconcile; targets done give their budget back and wake waiting ones.
      await reconcileApplying(r.id, hosts);
      await flushCoordinator(f.fleet);
      await drain(r.id);
      await sample();
      // Half of the hosts holding a slot come back from their reboot.
      for (const id of [...holding].slice(0, Math.max(1, Math.ceil(holding.size / 2)))) {
        const h = hosts.find((x) => x.id === id)!;
        expect((await zincati(f.baseUrl, "steady-state", h.fleetlockId)).status).toBe(200);
        holding.delete(id);
        rebooted.add(id);
      }
      await flushCoordinator(f.fleet);
      await drain(r.id);
      await sample();
    }
    const final = await getRollout(r.id);
    expect(final.state).toBe("succeeded");
    expect(final.counts.done).toBe(hosts.length);
    expect(rebooted.size).toBe(hosts.length);
    expect(samples).toBeGreaterThan(10);
    expect(maxSeen).toBe(1);
    // And the audit trail, replayed in the coordinator's order, agrees.
    await flushCoordinator(f.fleet);
    const audit = await auditMaxPerZone(f.fleet, hosts);
    expect(audit.max).toBe(1);
    expect(audit.takes).toBe(2 * hosts.length);
    // The two contended: hosts were refused for the budget and targets waited for it.
    expect(budgetRefusals).toBeGreaterThan(0);
    expect(waitedForBudget).toBeGreaterThan(0);
  });

  it("a parked host of a zone is granted when that zone's rollout target finishes, and says why it waited", async () => {
    const f = await fleetWithKey();
    await putGroup(f.fleet, "default", { slots: 2, queue_wait_s: 30 });
    await call("PATCH", `/v1/fleets/${f.fleet}`, { body: { disruption_budget: { per_label: { zone: 1 } } } });
    const hosts = await zonedFleet(f.fleet, 2);
    const [z1a, z1b] = hosts.filter((h) => h.zone === "z1");
    const r = await startRollout({ fleet: f.fleet, concurrency: 1, selector: { servers: [z1a.id] } });
    expect((await targets(r.id, "?state=applying")).map((t) => t.server_id)).toEqual([z1a.id]);
    // The server under the rollout may reboot too (one disruption); another zone's host may reboot.
    const other = hosts.find((h) => h.zone === "z2")!;
    expect((await zincati(f.baseUrl, "pre-reboot", other.fleetlockId)).status).toBe(200);
    // z1's other host parks behind the rollout's target in its zone.
    const parked = zincati(f.baseUrl, "pre-reboot", z1b.fleetlockId);
    const g = await until(f.fleet, (x) => x.queue.some((q) => q.id === z1b.fleetlockId));
    const mine = (g.queue as unknown as { id: string; blocked_by: { kind: string; servers?: string[] }[] }[]).find(
      (q) => q.id === z1b.fleetlockId,
    )!;
    expect(mine.blocked_by).toEqual([
      expect.objectContaining({ kind: "budget", servers: [z1a.hostname], detail: "zone=z1" }),
    ]);
    await reconcileApplying(r.id, hosts);
    expect((await parked).status).toBe(200);
    expect((await getRollout(r.id)).state).toBe("succeeded");
  });

  it("a target refused for the budget waits as waiting_budget with blocked_by, and starts when the budget frees", async () => {
    // A host reboots: the fleet's one unit is taken.
    const { f, hosts } = await budgetTakenByReboot();
    expect((await zincati(f.baseUrl, "pre-reboot", hosts[1].fleetlockId)).json).toMatchObject({
      kind: "budget_exhausted",
    });
    const r = await startRollout({ fleet: f.fleet, concurrency: 2, selector: { servers: [hosts[2].id] } });
    const [t] = (await call("GET", `/v1/rollouts/${r.id}/targets`)).json.items;
    expect(t).toMatchObject({ state: "waiting_budget" });
    expect(t.blocked_by).toEqual([
      expect.objectContaining({ kind: "budget", servers: [hosts[0].hostname], detail: "fleet", threshold: 1 }),
    ]);
    expect((await getRollout(r.id)).counts).toMatchObject({ waiting_budget: 1, queued: 0, applying: 0 });
    // The reboot ends: the coordinator wakes the rollout through its outbox, no timer of the rollout's.
    expect((await zincati(f.baseUrl, "steady-state", hosts[0].fleetlockId)).status).toBe(200);
    await flushCoordinator(f.fleet);
    await drain(r.id);
    const [started] = (await call("GET", `/v1/rollouts/${r.id}/targets`)).json.items;
    expect(started).toMatchObject({ state: "applying", blocked_by: [] });
    await reconcileApplying(r.id, hosts);
    expect((await getRollout(r.id)).state).toBe("succeeded");
  });
  it("a budget set while a rollout runs holds its next targets, and removing it lets them go", async () => {
    const f = await fleetWithKey();
    await putGroup(f.fleet, "default", { slots: 2 });
    const hosts = await zonedFleet(f.fleet, 1);
    const r = await startRollout({
      fleet: f.fleet,
      concurrency: 1,
      selector: { servers: [hosts[1].id, hosts[2].id, hosts[3].id] },
    });
    expect((await getRollout(r.id)).counts).toMatchObject({ applying: 1, queued: 2 });
    // No budget when it started; one is set now, and a host takes its one unit for a reboot.
    const patched = await call("PATCH", `/v1/fleets/${f.fleet}`, {
      body: { disruption_budget: { max_unavailable: 1, per_label: {} } },
    });
    expect(patched.status).toBe(200);
    await flushCoordinator(f.fleet);
    expect((await zincati(f.baseUrl, "pre-reboot", hosts[0].fleetlockId)).status).toBe(200);
    // The applying target ends: the next ones ask for the budget and wait, as in a rollout started with it.
    await reconcileApplying(r.id, hosts);
    await flushCoordinator(f.fleet);
    await drain(r.id);
    expect((await getRollout(r.id)).counts).toMatchObject({ done: 1, waiting_budget: 2, applying: 0 });
    // Removed again: the waiting target is queued and starts without asking.
    await call("PATCH", `/v1/fleets/${f.fleet}`, { body: { disruption_budget: null } });
    await drain(r.id);
    expect((await getRollout(r.id)).counts).toMatchObject({ done: 1, applying: 1, queued: 1, waiting_budget: 0 });
  });

  it("a strategy's next step is not released while its canary waits for the budget", async () => {
    const { f, hosts } = await budgetTakenByReboot();
    const r = await startRollout({
      fleet: f.fleet,
      concurrency: 3,
      selector: { servers: hosts.slice(1).map((h) => h.id) },
      strategy: {
        steps: [
          { type: "canary", count: 1 },
          { type: "wave", percent: 100 },
        ],
      },
    });
    // The canary has not run: the wave must not start (and ask for budget) past it.
    expect((await getRollout(r.id)).counts).toMatchObject({ waiting_budget: 1, queued: 2, applying: 0 });
    expect((await call("GET", `/v1/rollouts/${r.id}`)).json.current_phase).toBe(0);
    expect((await zincati(f.baseUrl, "steady-state", hosts[0].fleetlockId)).status).toBe(200);
    await flushCoordinator(f.fleet);
    await drain(r.id);
    expect((await getRollout(r.id)).counts).toMatchObject({ waiting_budget: 0, queued: 2, applying: 1 });
  });

  it("an operator may end a target waiting for the budget: it is skipped and the rollout finishes", async () => {
    const { f, hosts } = await budgetTakenByReboot();
    const r = await startRollout({ fleet: f.fleet, selector: { servers: [hosts[1].id] } });
    expect((await getRollout(r.id)).counts).toMatchObject({ waiting_budget: 1 });
    expect(await blockedKeys(r.id)).toEqual([`blocked:0:${hosts[1].id}`]);
    const ended = await call("POST", `/v1/rollouts/${r.id}/targets/${hosts[1].hostname}/end`, {
      body: { reason: "not this one" },
    });
    expect(ended.status).toBe(200);
    expect(ended.json.target).toMatchObject({ state: "skipped" });
    const after = await getRollout(r.id);
    expect(after.counts).toMatchObject({ waiting_budget: 0, skipped: 1 });
    expect(after.state).toBe("succeeded");
    // Why it waited ended with the wait, in the same turn.
    expect(await blockedKeys(r.id)).toEqual([]);
  });

  it("a rollout cancelled while targets wait for the budget keeps no reason for them", async () => {
    const { f, hosts } = await budgetTakenByReboot();
    const r = await startRollout({
      fleet: f.fleet,
      concurrency: 3,
      selector: { servers: hosts.slice(1).map((h) => h.id) },
    });
    expect((await getRollout(r.id)).counts).toMatchObject({ waiting_budget: 3 });
    expect((await blockedKeys(r.id)).sort()).toEqual(
      hosts
        .slice(1)
        .map((h) => `blocked:0:${h.id}`)
        .sort(),
    );
    const cancelled = await call("POST", `/v1/rollouts/${r.id}/cancel`, { body: {} });
    expect(cancelled.status).toBe(200);
    expect((await getRollout(r.id)).counts).toMatchObject({ waiting_budget: 0, skipped: 3 });
    expect(await blockedKeys(r.id)).toEqual([]);
  });
});
