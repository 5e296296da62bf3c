/**
 * Rollouts that cannot lie (docs/rollouts.md): a rollout that would write no server is refused unless a
 * channel-only move is asked for; an exclude naming no server is refused; every target has a
 * deadline; a cancel lets the (fleet, agent) go in bounded time; an operator can end a stuck target.
 */
import { runInDurableObject } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import { CANCEL_GRACE_S, DEFAULT_SERVER_TIMEOUT_S } from "../src/domain/limits";
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
  rolloutStub,
  startRollout,
  targets,
} from "./rollout-helpers";

const start = (body: Record<string, unknown>) =>
  call("POST", "/v1/rollouts", { body: { agent: AGENT, image: NEW, version: "2.0.0", ...body } });

describe("a rollout that would write no server", () => {
  it("of an agent no server runs (a typo) is refused with no_targets naming the agent and the fleet's agents; nothing is created", async () => {
    const { fleet } = await fleetWithAgent(1);
    const res = await start({ fleet, agent: "fw-agnet" });
    expect(res.status).toBe(422);
    expect(res.json.error.code).toBe("no_targets");
    expect(res.json.error.message).toMatch(/runs agent 'fw-agnet'/);
    expect(res.json.error.message).toMatch(/fw-agent, logs/);
    expect(res.json.error.details.fleet_agents).toEqual([AGENT, "logs"]);
    expect((await call("GET", `/v1/fleets/${fleet}/channels/fw-agnet`)).status).toBe(404);
    expect((await call("GET", `/v1/rollouts?fleet=${fleet}`)).json.items).toEqual([]);
  });

  it("whose selector matches no server running the agent is refused too", async () => {
    const { fleet } = await fleetWithAgent(1);
    const res = await start({ fleet, selector: { roles: ["nobody-has-it"] } });
    expect(res.status).toBe(422);
    expect(res.json.error.code).toBe("no_targets");
    expect(res.json.error.message).toMatch(/matches the selector/);
  });

  it("is a channel-only move when asked for: it succeeds at once, writes no server and moves the channel", async () => {
    const { fleet, hosts } = await fleetWithAgent(1);
    const res = await start({ fleet, agent: "new-agent", channel_only: true });
    expect(res.status).toBe(201);
    await drain(res.json.id);
    const r = await getRollout(res.json.id);
    expect(r).toMatchObject({ state: "succeeded", counts: { queued: 0, applying: 0, done: 0 } });
    expect((await call("GET", `/v1/fleets/${fleet}/channels/new-agent`)).json.image).toBe(NEW);
    expect((await call("GET", `/v1/servers/${hosts[0].id}`)).json.desired.generation).toBe(2);
    // A channel-only move with a selector or without the channel is a contradiction.
    expect((await start({ fleet, channel_only: true, update_channel: false })).json.error.code).toBe(
      "validation_failed",
    );
    expect((await start({ fleet, channel_only: true, exclude: [hosts[0].hostname] })).json.error.code).toBe(
      "validation_failed",
    );
  });

  it("an exclude or selector naming no server of the fleet is refused with unknown_server, and nothing starts", async () => {
    const { fleet, hosts } = await fleetWithAgent(2);
    const res = await start({ fleet, exclude: [hosts[0].hostname, "ghost-7.example.com"] });
    expect(res.status).toBe(422);
    expect(res.json.error.code).toBe("unknown_server");
    expect(res.json.error.message).toMatch(/ghost-7\.example\.com/);
    expect(res.json.error.details.unknown).toEqual(["ghost-7.example.com"]);
    const sel = await start({ fleet, selector: { servers: [hosts[1].hostname, crypto.randomUUID()] } });
    expect(sel.json.error.code).toBe("unknown_server");
    expect((await call("GET", `/v1/rollouts?fleet=${fleet}`)).json.items).toEqual([]);
    // Hostnames select and exclude (any case).
    const ok = await start({ fleet, selector: { servers: [hosts[1].hostname.toUpperCase()] }, exclude: [hosts[0].id] });
    expect(ok.status).toBe(201);
    expect(ok.json.counts).toMatchObject({ applying: 1, skipped: 0 });
  });

  it("answers 201 with Location naming the rollout", async () => {
    const { fleet } = await fleetWithAgent(1);
    const res = await start({ fleet });
    expect(res.status).toBe(201);
    expect(res.headers.get("Location")).toBe(`/v1/rollouts/${res.json.id}`);
  });
});

describe("deadlines", () => {
  it("a rollout that names no server_timeout_s gets the default one: the deadline timer waits for it", async () => {
    const { fleet } = await fleetWithAgent(2);
    const before = Date.now();
    const r = await startRollout({ fleet, concurrency: 2 });
    expect((await getRollout(r.id)) as unknown).toMatchObject({ server_timeout_s: DEFAULT_SERVER_TIMEOUT_S });
    expect(await deadlineTimer(r.id)).toBeGreaterThanOrEqual(before + DEFAULT_SERVER_TIMEOUT_S * 1000);
    // Its time has not come: firing the timer early times nothing out.
    await fireTimersNow(rolloutStub(r.id));
    expect((await getRollout(r.id)).counts).toMatchObject({ applying: 2, timed_out: 0 });
    expect(await deadlineTimer(r.id)).toBeGreaterThanOrEqual(before + DEFAULT_SERVER_TIMEOUT_S * 1000);
  });

  it("a cancel lets the (fleet, agent) go in bounded time although its hosts are dead", async () => {
    const { fleet } = await fleetWithAgent(2);
    const r = await startRollout({ fleet, concurrency: 2 });
    const cancelled = await call("POST", `/v1/rollouts/${r.id}/cancel`);
    expect(cancelled.json).toMatchObject({ state: "cancelled", counts: { applying: 2 } });
    // The targets in flight are waited for at most the grace, not their hour.
    expect(await deadlineTimer(r.id)).toBeLessThanOrEqual(Date.now() + CANCEL_GRACE_S * 1000);
    const refused = await start({ fleet });
    expect(refused.status).toBe(409);
    expect(refused.json.error.code).toBe("rollout_in_progress");
    expect(refused.json.error.message).toMatch(/cancelled.*2 target\(s\) applying/);
    // The grace runs out: both time out, the claim is released, and the next rollout starts.
    await agePastDeadlines(r.id, (CANCEL_GRACE_S + 1) * 1000);
    await fireTimersNow(rolloutStub(r.id));
    await drain(r.id);
    const ended = await targets(r.id, "?state=timed_out");
    expect(ended).toHaveLength(2);
    expect(ended[0].reason).toMatch(/of the cancel/);
    expect((await start({ fleet })).status).toBe(201);
  });

  it("a cancelled rollout stored without deadlines (older code) gets them when a later start finds it holding the agent", async () => {
    const { fleet } = await fleetWithAgent(1);
    const r = await startRollout({ fleet, concurrency: 1 });
    await call("POST", `/v1/rollouts/${r.id}/cancel`);
    // As older code left it: no server_timeout_s, no timer.
    await runInDurableObject(rolloutStub(r.id), (_i, state) => {
      const spec = state.storage.kv.get<Record<string, unknown>>("spec")!;
      state.storage.kv.put("spec", { ...spec, server_timeout_s: null });
      state.storage.sql.exec("DELETE FROM _timers WHERE name = 'deadlines'");
      state.storage.kv.delete("cancels");
    });
    const { evictDurableObject } = await import("cloudflare:test");
    await evictDurableObject(rolloutStub(r.id));
    expect(await deadlineTimer(r.id)).toBeNull();
    expect((await start({ fleet })).status).toBe(409);
    expect(await deadlineTimer(r.id)).toBeLessThanOrEqual(Date.now() + CANCEL_GRACE_S * 1000);
    await agePastDeadlines(r.id, (CANCEL_GRACE_S + 1) * 1000);
    await evictDurableObject(rolloutStub(r.id));
    await fireTimersNow(rolloutStub(r.id));
    await drain(r.id);
    expect((await start({ fleet })).status).toBe(201);
  });
});

describe("one deadline timer for every target", () => {
  it("however many targets are in flight, the rollout keeps one timer for their deadlines, not one each", async () => {
    const { fleet } = await fleetWithAgent(6);
    const r = await startRollout({ fleet, concurrency: 6 });
    expect((await getRollout(r.id)).counts.applying).toBe(6);
    const names = await runInDurableObject(rolloutStub(r.id), (_i, state) =>
      state.storage.sql
        .exec<{ name: string }>("SELECT name FROM _timers")
        .toArray()
        .map((t) => t.name),
    );
    expect(names.filter((n) => n.startsWith("timeout"))).toEqual([]);
    expect(names.filter((n) => n === "deadlines")).toHaveLength(1);
  });

  it("a target's own timer, as older code stored it, still times that target out", async () => {
    const { fleet } = await fleetWithAgent(2);
    const r = await startRollout({ fleet, concurrency: 2 });
    const [old] = await targets(r.id, "?state=applying");
    await runInDurableObject(rolloutStub(r.id), (_i, state) => {
      state.storage.sql.exec("DELETE FROM _timers WHERE name = 'deadlines'");
      state.storage.sql.exec(
        "INSERT INTO _timers (name, due_at, payload) VALUES (?, ?, 'null')",
        `timeout:0:${old.server_id}`,
        Date.now() + 60_000,
      );
    });
    await fireTimersNow(rolloutStub(r.id), "timeout:");
    await drain(r.id);
    expect((await targets(r.id, "?state=timed_out")).map((t) => t.server_id)).toEqual([old.server_id]);
    expect((await getRollout(r.id)).counts).toMatchObject({ applying: 1, timed_out: 1 });
  });

  it("after a rollback from a cancel, the targets then in flight keep the cancel's grace and the rollback's have their own time", async () => {
    const { fleet, hosts } = await fleetWithAgent(2);
    const r = await startRollout({ fleet, concurrency: 2, server_timeout_s: 600 });
    // One target done (so the rollback has one to take back, with room to start it), the other in
    // flight at the cancel.
    const [first] = await targets(r.id, "?state=applying");
    await hostReconcile(hosts.find((h) => h.id === first.server_id)!);
    await settle(first.server_id);
    await drain(r.id);
    const [inFlight] = await targets(r.id, "?state=applying");
    expect(inFlight.server_id).not.toBe(first.server_id);
    expect((await call("POST", `/v1/rollouts/${r.id}/cancel`)).status).toBe(200);
    expect((await call("POST", `/v1/rollouts/${r.id}/rollback`)).status).toBe(200);
    await drain(r.id);
    expect((await targets(r.id, "?pass=1&state=applying")).map((t) => t.server_id)).toEqual([first.server_id]);
    // Past the grace, not past the hour: only the target in flight at the cancel times out.
    await agePastDeadlines(r.id, (CANCEL_GRACE_S + 1) * 1000);
    await fireTimersNow(rolloutStub(r.id));
    await drain(r.id);
    const back = await targets(r.id, "?pass=1");
    expect(back.map((t) => [t.server_id, t.state])).toEqual([[first.server_id, "applying"]]);
    const forward = await targets(r.id, "?pass=0&state=timed_out");
    expect(forward.map((t) => [t.server_id, t.reason])).toEqual([
      [inFlight.server_id, expect.stringMatching(/of the cancel/)],
    ]);
  });
});

describe("ending a stuck target", () => {
  it("by hostname: an applying target is failed with the operator's reason, audited; again is 409; a stranger is 404", async () => {
    const { fleet } = await fleetWithAgent(3);
    const r = await startRollout({ fleet, concurrency: 1 });
    const [stuck] = await targets(r.id, "?state=applying");
    const res = await call("POST", `/v1/rollouts/${r.id}/targets/${stuck.hostname}/end`, {
      body: { reason: "host is dead" },
    });
    expect(res.status).toBe(200);
    expect(res.json.target).toMatchObject({ server_id: stuck.server_id, state: "failed" });
    expect(res.json.target.reason).toMatch(/^ended by .*: host is dead$/);
    // The next target starts in its place.
    expect(res.json.rollout.counts).toMatchObject({ failed: 1, applying: 1, queued: 1 });
    const audit = await call("GET", `/v1/audit?target=rollout:${r.id}`);
    expect(audit.json.items.map((a: any) => a.action)).toContain("rollout.target.end");
    const again = await call("POST", `/v1/rollouts/${r.id}/targets/${stuck.server_id}/end`);
    expect(again.status).toBe(409);
    expect(again.json.error.code).toBe("invalid_state");
    expect((await call("POST", `/v1/rollouts/${r.id}/targets/nobody.example.com/end`)).status).toBe(404);
  });

  it("a queued target is skipped; ending the last one in flight of a cancelled rollout frees the agent at once", async () => {
    const { fleet } = await fleetWithAgent(2);
    const r = await startRollout({ fleet, concurrency: 1 });
    const [queued] = await targets(r.id, "?state=queued");
    const skip = await call("POST", `/v1/rollouts/${r.id}/targets/${queued.server_id}/end`);
    expect(skip.json.target).toMatchObject({ state: "skipped" });
    await call("POST", `/v1/rollouts/${r.id}/cancel`);
    const [applying] = await targets(r.id, "?state=applying");
    await call("POST", `/v1/rollouts/${r.id}/targets/${applying.server_id}/end`);
    await drain(r.id);
    expect((await start({ fleet })).status).toBe(201);
  });
});
