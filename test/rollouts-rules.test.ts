/**
 * The rollout rules (docs/rollouts.md) through the HTTP API and the objects: concurrency under racing reports,
 * timeouts on the scheduler, abort criteria, operator controls, eviction, duplicate and reordered
 * events, one running rollout per (fleet, agent).
 */
import { evictDurableObject, runInDurableObject } from "cloudflare:test";
import { describe, expect, it } from "vitest";
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
  OLD,
  reconcileApplying,
  rolloutStub,
  startRollout,
  targets,
  type Host,
} from "./rollout-helpers";

const applyingInObject = (id: string) =>
  runInDurableObject(
    rolloutStub(id),
    (_i, state) =>
      state.storage.sql.exec<{ n: number }>("SELECT COUNT(*) AS n FROM targets WHERE state = 'applying'").one().n,
  );

const desiredImage = async (h: Host) => {
  const s = await call("GET", `/v1/servers/${h.id}`);
  return s.json.desired.agents.find((a: any) => a.name === AGENT)?.image as string;
};

describe("concurrency", () => {
  it("never more than `concurrency` targets applying while every host reports at once, twice over", async () => {
    const { fleet, hosts } = await fleetWithAgent(12);
    const r = await startRollout({ fleet, concurrency: 3 });
    let max = 0;
    for (let round = 0; round < 12 && (await getRollout(r.id)).state === "running"; round++) {
      // Every host reports concurrently (those not targeted yet too), each report sent twice.
      await Promise.all(hosts.flatMap((h) => [hostReconcile(h), hostReconcile(h)]));
      await Promise.all(hosts.map((h) => settle(h.id)));
      await drain(r.id);
      const n = await applyingInObject(r.id);
      const written = (await Promise.all(hosts.map(desiredImage))).filter((i) => i === NEW).length;
      const done = (await getRollout(r.id)).counts.done;
      max = Math.max(max, n, written - done);
    }
    const final = await getRollout(r.id);
    expect(final.state).toBe("succeeded");
    expect(final.counts.done).toBe(12);
    expect(max).toBeLessThanOrEqual(3);
    expect(max).toBe(3);
  });
});

describe("timeouts", () => {
  it("a target with no realizing report within server_timeout_s times out from the rollout's scheduler", async () => {
    const { fleet } = await fleetWithAgent(2);
    const r = await startRollout({ fleet, concurrency: 2, server_timeout_s: 30 });
    expect(await deadlineTimer(r.id)).toBeGreaterThan(Date.now() + 25_000);
    await agePastDeadlines(r.id, 31_000);
    await fireTimersNow(rolloutStub(r.id));
    await drain(r.id);
    const after = await getRollout(r.id);
    expect(after.counts.timed_out).toBe(2);
    expect(after.state).toBe("succeeded"); // no abort rule: timed-out targets end the pass too
    expect((await targets(r.id, "?state=timed_out"))[0].reason).toMatch(/server_timeout_s/);
  });
});

describe("a host whose engine does not answer", () => {
  it("reports its errors under the generation it last reached: accepted, and its target stays applying", async () => {
    const { fleet, hosts } = await fleetWithAgent(1);
    const r = await startRollout({ fleet, concurrency: 1 });
    const [target] = await targets(r.id, "?state=applying");
    const host = hosts[0];
    // As the agent reports a pass that could not list the machine: the agents as last seen, each
    // with an error, under the generation before the rollout's.
    const res = await call("PUT", "/v1/agent/inventory", {
      token: host.token,
      body: {
        generation: target.generation! - 1,
        reconciled_at: new Date().toISOString(),
        boot_id: "boot-1",
        agents: [{ name: AGENT, image: OLD, version: "1.0.0", instance_id: "i-1", state: "running" }],
        errors: [AGENT, "logs"].map((agent) => ({
          agent,
          op: "start",
          message: "the machine could not be asked what it runs (last seen running): ps timed out",
        })),
        assignments: { units: [], storage: [] },
      },
    });
    expect(res.status).toBe(200);
    expect(res.json.desired_generation).toBe(target.generation);
    await settle(host.id);
    expect((await getRollout(r.id)).counts).toMatchObject({ applying: 1, failed: 0 });
    // The engine answers again: the pass reaches the rollout's generation.
    await hostReconcile(host);
    await settle(host.id);
    expect((await getRollout(r.id)).counts).toMatchObject({ done: 1, failed: 0 });
  });
});

describe("abort criteria", () => {
  it("max_failures: once failures exceed it the rollout fails, applying targets finish, queued ones are skipped", async () => {
    const { fleet, hosts } = await fleetWithAgent(6);
    const r = await startRollout({ fleet, concurrency: 2, abort: { max_failures: 0 } });
    const [first, second] = (await targets(r.id, "?state=applying")).map((t) =>
      hosts.find((h) => h.id === t.server_id)!,
    );
    await hostReconcile(first, { fail: true });
    await settle(first.id);
    const failed = await getRollout(r.id);
    expect(failed.state).toBe("failed");
    expect(failed.reason).toMatch(/max_failures 0/);
    expect(failed.counts).toMatchObject({ failed: 1, applying: 1, skipped: 4, queued: 0 });
    // The one applying finishes; nothing new starts.
    await hostReconcile(second);
    await settle(second.id);
    expect((await getRollout(r.id)).counts).toMatchObject({ done: 1, failed: 1, applying: 0, skipped: 4 });
    expect((await targets(r.id, "?state=skipped"))[0].reason).toBe("aborted");
    const audit = await call("GET", `/v1/audit?target=rollout:${r.id}`);
    expect(audit.json.items.map((a: any) => a.action)).toContain("rollout.failed");
  });

  it("max_failure_percent judges only once min_completed targets ended", async () => {
    const { fleet, hosts } = await fleetWithAgent(8);
    const r = await startRollout({ fleet, concurrency: 2, abort: { max_failure_percent: 40, min_completed: 4 } });
    const failing = new Set<string>();
    // Round 1: both fail (2 of 2 failed, but only 2 ended: below min_completed).
    for (const t of await targets(r.id, "?state=applying")) failing.add(t.server_id);
    await reconcileApplying(r.id, hosts, { fail: (h) => failing.has(h.id) });
    expect((await getRollout(r.id)).state).toBe("running");
    // Round 2: both succeed. After the first, 3 ended (a new target starts); after the second,
    // 2 of 4 failed = 50% > 40%: failed, the one just started keeps applying, 3 queued skipped.
    await reconcileApplying(r.id, hosts);
    const after = await getRollout(r.id);
    expect(after.state).toBe("failed");
    expect(after.reason).toMatch(/max_failure_percent 40/);
    expect(after.counts).toMatchObject({ failed: 2, done: 2, applying: 1, skipped: 3, queued: 0 });
  });
});

describe("operator controls", () => {
  it("pause stops new targets, resume continues, cancel skips what is queued", async () => {
    const { fleet, hosts } = await fleetWithAgent(5);
    const r = await startRollout({ fleet, concurrency: 1 });
    expect((await call("POST", `/v1/rollouts/${r.id}/pause`)).json.state).toBe("paused");
    await reconcileApplying(r.id, hosts);
    expect((await getRollout(r.id)).counts).toMatchObject({ done: 1, applying: 0, queued: 4 });
    const again = await call("POST", `/v1/rollouts/${r.id}/pause`);
    expect(again.status).toBe(409);
    expect(again.json.error.code).toBe("invalid_state");
    expect((await call("POST", `/v1/rollouts/${r.id}/resume`)).json.state).toBe("running");
    await drain(r.id);
    expect((await getRollout(r.id)).counts).toMatchObject({ applying: 1, queued: 3 });
    const cancelled = await call("POST", `/v1/rollouts/${r.id}/cancel`);
    expect(cancelled.json.state).toBe("cancelled");
    expect(cancelled.json.counts).toMatchObject({ applying: 1, queued: 0, skipped: 3 });
    await reconcileApplying(r.id, hosts);
    expect((await getRollout(r.id)).counts).toMatchObject({ done: 2, applying: 0 });
    const actions = (await call("GET", `/v1/audit?target=rollout:${r.id}`)).json.items.map((a: any) => a.action);
    expect(actions).toEqual(
      expect.arrayContaining(["rollout.start", "rollout.pause", "rollout.resume", "rollout.cancel"]),
    );
  });

  it("rollback re-targets the done servers to the image each had before, keeping the id", async () => {
    const { fleet, hosts } = await fleetWithAgent(4);
    const r = await startRollout({ fleet, concurrency: 2 });
    await reconcileApplying(r.id, hosts); // two done, two applying
    const rb = await call("POST", `/v1/rollouts/${r.id}/rollback`);
    expect(rb.status).toBe(200);
    expect(rb.json).toMatchObject({ id: r.id, state: "rolling_back", pass: 1 });
    // The two forward targets still applying finish first (they count toward concurrency), then roll back too.
    for (let i = 0; i < 6 && (await getRollout(r.id)).state === "rolling_back"; i++) {
      await reconcileApplying(r.id, hosts);
      const ts = await call("GET", `/v1/rollouts/${r.id}/targets?pass=0&state=applying`);
      for (const t of ts.json.items) {
        const h = hosts.find((x) => x.id === t.server_id)!;
        await hostReconcile(h);
        await settle(h.id);
      }
      await drain(r.id);
    }
    const after = await getRollout(r.id);
    expect(after.state).toBe("rolled_back");
    expect(after.counts.done).toBe(4);
    for (const h of hosts) expect(await desiredImage(h)).toBe(OLD);
    const again = await call("POST", `/v1/rollouts/${r.id}/rollback`);
    expect(again.status).toBe(409);
    expect(again.json.error.code).toBe("invalid_state");
  });
});

describe("durability and idempotence", () => {
  it("a rollout object evicted mid-flight resumes exactly where it was", async () => {
    const { fleet, hosts } = await fleetWithAgent(6);
    const r = await startRollout({ fleet, concurrency: 2, server_timeout_s: 600 });
    await reconcileApplying(r.id, hosts);
    const before = await getRollout(r.id);
    const rowsBefore = await targets(r.id);
    await evictDurableObject(rolloutStub(r.id));
    const after = await getRollout(r.id);
    expect(after.counts).toEqual(before.counts);
    expect(after.change).toBe(before.change);
    expect(await targets(r.id)).toEqual(rowsBefore);
    // The deadline timer came back with the object: due no later than the earlier of the two in
    // flight (it may be due earlier still, for a target that has ended since: it then finds none due).
    const earliest = await runInDurableObject(rolloutStub(r.id), (_i, state) =>
      state.storage.sql
        .exec<{ at: number; n: number }>(
          "SELECT MIN(started_at) AS at, COUNT(*) AS n FROM targets WHERE state = 'applying'",
        )
        .one(),
    );
    expect(earliest.n).toBe(2);
    const due = await deadlineTimer(r.id);
    expect(due).toBeLessThanOrEqual(earliest.at + 600_000);
    expect(due).toBeGreaterThan(Date.now() + 590_000);
    for (let i = 0; i < 5 && (await getRollout(r.id)).state === "running"; i++) await reconcileApplying(r.id, hosts);
    expect(await getRollout(r.id)).toMatchObject({ state: "succeeded", counts: { done: 6 } });
  });

  it("a duplicated or reordered realization event changes nothing", async () => {
    const { fleet, hosts } = await fleetWithAgent(3);
    const r = await startRollout({ fleet, concurrency: 1 });
    const [t] = await targets(r.id, "?state=applying");
    const h = hosts.find((x) => x.id === t.server_id)!;
    const gen = await hostReconcile(h);
    await settle(h.id);
    await drain(r.id);
    const after = await getRollout(r.id);
    expect(after.counts).toMatchObject({ done: 1, applying: 1 });
    const stub = rolloutStub(r.id);
    const base = { rollout_id: r.id, pass: 0, server_id: h.id, generation: gen, at: Date.now() };
    expect(await stub.targetEvent({ ...base, outcome: "realized" })).toEqual({ ok: true, changed: false });
    expect(await stub.targetEvent({ ...base, outcome: "failed", message: "late" })).toEqual({
      ok: true,
      changed: false,
    });
    expect(await stub.targetEvent({ ...base, outcome: "removed" })).toEqual({ ok: true, changed: false });
    // An event for a generation the rollout did not write, on the target now applying.
    const [next] = await targets(r.id, "?state=applying");
    expect(
      await stub.targetEvent({
        ...base,
        server_id: next.server_id,
        generation: next.generation! - 1,
        outcome: "realized",
      }),
    ).toEqual({ ok: true, changed: false });
    const same = await getRollout(r.id);
    expect(same.counts).toEqual(after.counts);
    expect(same.change).toBe(after.change);
    // The host reports the same thing again: no second event.
    await hostReconcile(h);
    await settle(h.id);
    expect((await getRollout(r.id)).change).toBe(after.change);
  });
});

describe("one running rollout per (fleet, agent)", () => {
  it("of two racing different starts one wins; the other gets 409 rollout_in_progress naming it; another agent is free", async () => {
    const { fleet } = await fleetWithAgent(2);
    const body = { fleet, agent: AGENT, image: NEW, version: "2.0.0" };
    // Not the same request (the same one sent twice is one start: test/rollouts-claim.test.ts).
    const [a, b] = await Promise.all([
      call("POST", "/v1/rollouts", { body }),
      call("POST", "/v1/rollouts", { body: { ...body, concurrency: 2 } }),
    ]);
    const won = [a, b].find((x) => x.status === 201)!;
    const lost = [a, b].find((x) => x.status !== 201)!;
    expect(won).toBeDefined();
    expect(lost.status).toBe(409);
    expect(lost.json.error.code).toBe("rollout_in_progress");
    expect(lost.json.error.details.rollout_id).toBe(won.json.id);
    const other = await call("POST", "/v1/rollouts", {
      body: { ...body, agent: "logs", image: "registry.example/logs:2", version: "2" },
    });
    expect(other.status).toBe(201);
    // Cancelled with targets still applying, it holds the agent until they end (or its grace
    // runs out: test/rollouts-refusals.test.ts).
    await call("POST", `/v1/rollouts/${won.json.id}/cancel`);
    const stillApplying = (await getRollout(won.json.id)).counts.applying;
    expect(stillApplying).toBe(2);
    expect((await call("POST", "/v1/rollouts", { body })).status).toBe(409);
  });

  it("the agent is free again once a cancelled rollout has nothing in flight", async () => {
    const { fleet, hosts } = await fleetWithAgent(2);
    const r = await startRollout({ fleet, concurrency: 1 });
    await call("POST", `/v1/rollouts/${r.id}/cancel`);
    const body = { fleet, agent: AGENT, image: NEW, version: "2.0.0" };
    expect((await call("POST", "/v1/rollouts", { body })).status).toBe(409);
    await reconcileApplying(r.id, hosts);
    const next = await call("POST", "/v1/rollouts", { body });
    expect(next.status).toBe(201);
    // The one already done is skipped: its desired config has the image.
    await drain(next.json.id);
    expect((await targets(next.json.id, "?state=skipped")).map((t) => t.reason)).toContain("already_at_image");
  });
});

describe("rollback and the (fleet, agent) claim", () => {
  it("a rollback needs the agent: refused with rollout_in_progress while another rollout holds it, and it changes nothing", async () => {
    const { fleet, hosts } = await fleetWithAgent(2);
    const a = await startRollout({ fleet, concurrency: 2 });
    await reconcileApplying(a.id, hosts);
    expect((await getRollout(a.id)).state).toBe("succeeded");
    const b = await startRollout({ fleet, image: "registry.example/fw:3.0.0", version: "3.0.0" });
    const refused = await call("POST", `/v1/rollouts/${a.id}/rollback`);
    expect(refused.status).toBe(409);
    expect(refused.json.error).toMatchObject({ code: "rollout_in_progress", details: { rollout_id: b.id } });
    expect((await getRollout(a.id)).state).toBe("succeeded");
    // Once b has ended, a can roll back (and holds the agent while it does).
    await call("POST", `/v1/rollouts/${b.id}/cancel`);
    await reconcileApplying(b.id, hosts);
    const rb = await call("POST", `/v1/rollouts/${a.id}/rollback`);
    expect(rb.status).toBe(200);
    const c = await call("POST", "/v1/rollouts", { body: { fleet, agent: AGENT, image: NEW, version: "2.0.0" } });
    expect(c.status).toBe(409);
    expect(c.json.error.details.rollout_id).toBe(a.id);
  });
});

describe("targets", () => {
  it("selector and exclude: only servers with the agent and a matching role; excluded ones listed as skipped", async () => {
    const { fleet, hosts } = await fleetWithAgent(4, { server: (i) => ({ roles: i < 3 ? ["edge"] : ["core"] }) });
    const r = await startRollout({
      fleet,
      concurrency: 5,
      selector: { roles: ["edge"] },
      exclude: [hosts[0].hostname, hosts[1].id],
    });
    const all = await targets(r.id);
    expect(all.map((t) => t.server_id).sort()).toEqual([hosts[0].id, hosts[1].id, hosts[2].id].sort());
    expect(all.filter((t) => t.state === "skipped").map((t) => t.reason)).toEqual(["excluded", "excluded"]);
    expect(await desiredImage(hosts[0])).toBe(OLD);
    expect(await desiredImage(hosts[2])).toBe(NEW);
  });

  it("bad input changes nothing: validation, unknown fleet, unknown rollout", async () => {
    const bad = await call("POST", "/v1/rollouts", {
      body: { fleet: "x", agent: AGENT, image: NEW, version: "2", concurrency: 0 },
    });
    expect(bad.status).toBe(400);
    const both = await call("POST", "/v1/rollouts", {
      body: { fleet: "x", agent: AGENT, image: NEW, version: "2", abort: { max_failures: 1, max_failure_percent: 5 } },
    });
    expect(both.status).toBe(400);
    const unknown = await call("POST", "/v1/rollouts", {
      body: { fleet: "no-such-fleet", agent: AGENT, image: NEW, version: "2" },
    });
    expect(unknown.status).toBe(422);
    expect((await call("GET", `/v1/rollouts/${crypto.randomUUID()}`)).status).toBe(404);
    expect((await call("POST", `/v1/rollouts/${crypto.randomUUID()}/pause`)).status).toBe(404);
    expect((await call("GET", "/v1/rollouts/not-a-uuid")).status).toBe(400);
    const ro = await call("POST", "/v1/tokens", { body: { name: "ro", scope: "read" } });
    expect(
      (
        await call("POST", "/v1/rollouts", {
          token: ro.json.token,
          body: { fleet: "x", agent: AGENT, image: NEW, version: "2" },
        })
      ).status,
    ).toBe(403);
  });
});
