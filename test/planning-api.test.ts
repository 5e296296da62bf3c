import { createScheduledController, env, runInDurableObject } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import { INDEX_LEASE_MS } from "../src/ledger/projection";
import { QUIET_TIMER, quietGraceMs } from "../src/ledger/quiet";
import { runScheduled } from "../src/scheduled";
import { call, createFleet, d1Statements, registerServer } from "./helpers";

async function setup(capabilities: Record<string, boolean> = {}) {
  const f = await createFleet({ capabilities });
  for (const [agent, image] of [
    ["base", "base:1"],
    ["fw-agent", "fw:1"],
    ["s3", "s3:1"],
    ["logs", "logs:1"],
  ]) {
    expect(
      (await call("PUT", `/v1/fleets/${f.id}/channels/${agent}`, { body: { image, version: image.split(":")[1] } }))
        .status,
    ).toBe(200);
  }
  const role = await call("PUT", `/v1/fleets/${f.id}/roles/compute`, {
    body: {
      agents: [{ name: "base" }, { name: "fw-agent", when: "firewall" }, { name: "s3", when: "!object_storage" }],
    },
  });
  expect(role.status).toBe(200);
  await call("PUT", `/v1/fleets/${f.id}/roles/edge`, { body: { agents: [{ name: "logs" }] } });
  return f;
}

const desiredOf = async (id: string) => (await call("GET", `/v1/servers/${id}/desired`)).json;
const agentsOf = async (id: string) => (await desiredOf(id)).agents.map((a: any) => `${a.name}=${a.image}`);

describe("registration from the plan", () => {
  it("sets a new server's first desired config from its roles, the capabilities and the channels", async () => {
    const f = await setup({ firewall: true, object_storage: true });
    const s = await registerServer(f.id, { roles: ["compute"] });
    expect(s.desired.generation).toBe(1);
    expect((s as any).desired.agents.map((a: any) => `${a.name}=${a.image}`)).toEqual(["base=base:1", "fw-agent=fw:1"]);
    expect((s as any).planning).toMatchObject({ mode: "planned" });
    const plain = await registerServer(f.id, { roles: [] });
    expect((plain as any).desired.agents).toEqual([]);
  });

  it("a channel change moves no existing server; the next new server gets the new image", async () => {
    const f = await setup();
    const old = await registerServer(f.id, { roles: ["compute"] });
    await call("PUT", `/v1/fleets/${f.id}/channels/base`, { body: { image: "base:2", version: "2" } });
    expect(await desiredOf(old.id)).toMatchObject({ generation: 1 });
    expect(await agentsOf(old.id)).toEqual(["base=base:1", "s3=s3:1"]);
    const fresh = await registerServer(f.id, { roles: ["compute"] });
    expect(await agentsOf(fresh.id)).toEqual(["base=base:2", "s3=s3:1"]);
  });
});

describe("event-driven planning", () => {
  it("a role change re-plans the servers with that role only; agents they run keep their image; new ones get the channel's", async () => {
    const f = await setup();
    const compute = await registerServer(f.id, { roles: ["compute"] });
    const edge = await registerServer(f.id, { roles: ["edge"] });
    await call("PUT", `/v1/fleets/${f.id}/channels/base`, { body: { image: "base:2", version: "2" } });
    const res = await call("PUT", `/v1/fleets/${f.id}/roles/compute`, {
      body: { agents: [{ name: "base" }, { name: "logs" }] },
    });
    expect(res.json.planning).toMatchObject({ servers: 1, issued: 1, failed: 0, remaining: false });
    expect(await desiredOf(compute.id)).toMatchObject({ generation: 2 });
    expect(await agentsOf(compute.id)).toEqual(["base=base:1", "logs=logs:1"]);
    expect(await desiredOf(edge.id)).toMatchObject({ generation: 1 });
    const audit = await call("GET", `/v1/audit?target=server:${compute.id}`);
    // Audited by the role change itself (one row per re-planned server, in its batch).
    expect(audit.json.items.find((a: any) => a.action === "server.replan")).toMatchObject({
      details: { cause: "role.update" },
    });
    // Deleting the role empties its servers' plan.
    await call("DELETE", `/v1/fleets/${f.id}/roles/compute`);
    expect(await desiredOf(compute.id)).toMatchObject({ generation: 3, agents: [] });
  });

  it("an input change that leaves a server's plan as it is writes no generation", async () => {
    const f = await setup();
    const s = await registerServer(f.id, { roles: ["compute"] });
    // Same agents, reordered conditions on another role: compute's plan is unchanged.
    const res = await call("PUT", `/v1/fleets/${f.id}/roles/compute`, {
      body: {
        agents: [{ name: "s3", when: "!object_storage" }, { name: "base" }, { name: "fw-agent", when: "firewall" }],
      },
    });
    expect(res.json.planning).toMatchObject({ servers: 1, issued: 0 });
    expect(await desiredOf(s.id)).toMatchObject({ generation: 1 });
    // A capability nobody's conditions name: offered, nothing issued, no index write for the server.
    const before = await d1Statements();
    await call("PATCH", `/v1/fleets/${f.id}`, { body: { capabilities: { gpu: true } } });
    expect(await desiredOf(s.id)).toMatchObject({ generation: 1 });
    const after = await d1Statements();
    // fleet row + intent rev + marks + the marked servers' audit rows + the change's audit row in one
    // batch, mark deletion; no projection of the server.
    expect(after.writes - before.writes).toBeLessThanOrEqual(6);
  });

  it("a capability change re-plans every server of the fleet", async () => {
    const f = await setup();
    const a = await registerServer(f.id, { roles: ["compute"] });
    const b = await registerServer(f.id, { roles: ["compute", "edge"] });
    const res = await call("PATCH", `/v1/fleets/${f.id}`, {
      body: { capabilities: { firewall: true, object_storage: true } },
    });
    expect(res.status).toBe(200);
    expect(await agentsOf(a.id)).toEqual(["base=base:1", "fw-agent=fw:1"]);
    expect(await agentsOf(b.id)).toEqual(["base=base:1", "fw-agent=fw:1", "logs=logs:1"]);
    expect((await desiredOf(a.id)).generation).toBe(2);
  });

  it("a stale_after change reaches every ledger (its staleness deadline in the index)", async () => {
    const f = await setup();
    const s = await registerServer(f.id, { roles: [] });
    await call("PUT", "/v1/agent/inventory", {
      token: s.token,
      body: { generation: 1, reconciled_at: new Date().toISOString(), boot_id: "b", agents: [] },
    });
    await call("PATCH", `/v1/fleets/${f.id}`, { body: { stale_after_s: 45 } });
    const row = await env.DB.prepare("SELECT last_seen, stale_at FROM servers WHERE id = ?").bind(s.id).first<any>();
    // Leased while the ledger watches its host (src/ledger/quiet.ts), whose timer follows too.
    expect(row.stale_at - row.last_seen).toBe(45_000 + INDEX_LEASE_MS);
    const quietDue = await runInDurableObject(
      env.LEDGER.get(env.LEDGER.idFromName(s.id)),
      (_i, state) =>
        state.storage.sql.exec<{ due_at: number }>("SELECT due_at FROM _timers WHERE name = ?", QUIET_TIMER).one()
          .due_at,
    );
    expect(quietDue).toBe(row.last_seen + 45_000 + quietGraceMs(45));
  });

  it("the cron finishes marks a crashed run left behind, reading only the marks", async () => {
    const f = await setup();
    const s = await registerServer(f.id, { roles: ["compute"] });
    // As if a role change committed (role + mark) and the worker died before planning.
    await env.DB.batch([
      env.DB.prepare("UPDATE role_profiles SET agents = ? WHERE fleet_id = ? AND role = 'compute'").bind(
        JSON.stringify([{ name: "logs" }]),
        f.id,
      ),
      env.DB.prepare("UPDATE fleet_intent SET rev = rev + 1 WHERE fleet_id = ?").bind(f.id),
      env.DB.prepare(
        "INSERT INTO plan_marks (server_id, fleet_id, rev, marked_at) SELECT ?, ?, rev, 0 FROM fleet_intent WHERE fleet_id = ?",
      ).bind(s.id, f.id, f.id),
    ]);
    await runScheduled(createScheduledController({ scheduledTime: Date.now() }), env);
    expect(await agentsOf(s.id)).toEqual(["logs=logs:1"]);
    const left = await env.DB.prepare("SELECT COUNT(*) AS n FROM plan_marks WHERE fleet_id = ?").bind(f.id).first("n");
    expect(left).toBe(0);
  });
});

describe("pinned servers", () => {
  it("an explicit desired PUT pins the server; the planner leaves it alone until it is released", async () => {
    const f = await setup();
    const s = await registerServer(f.id, { roles: ["compute"] });
    const put = await call("PUT", `/v1/servers/${s.id}/desired`, {
      body: { generation: 5, agents: [{ name: "custom", image: "c:9", version: "9" }] },
    });
    expect(put.status).toBe(200);
    expect((await call("GET", `/v1/servers/${s.id}`)).json.planning).toMatchObject({
      mode: "pinned",
      pinned_by: "token:bootstrap",
    });
    await call("PUT", `/v1/fleets/${f.id}/roles/compute`, { body: { agents: [{ name: "base" }, { name: "logs" }] } });
    expect(await desiredOf(s.id)).toMatchObject({ generation: 5 });
    expect(await agentsOf(s.id)).toEqual(["custom=c:9"]);

    const released = await call("POST", `/v1/servers/${s.id}/desired/release`);
    expect(released.status).toBe(200);
    expect(released.json.planning.mode).toBe("planned");
    expect(released.json.desired.generation).toBe(6);
    expect(await agentsOf(s.id)).toEqual(["base=base:1", "logs=logs:1"]);
    expect((await call("POST", `/v1/servers/${crypto.randomUUID()}/desired/release`)).status).toBe(404);
  });

  it("a desired PUT that would change lifecycle is refused (409) and changes nothing", async () => {
    const f = await setup();
    const s = await registerServer(f.id, { roles: ["compute"] });
    const res = await call("PUT", `/v1/servers/${s.id}/desired`, {
      body: { generation: 2, agents: [], lifecycle: "uninstall" },
    });
    expect(res.status).toBe(409);
    expect(res.json.error.code).toBe("lifecycle_change_refused");
    expect(await desiredOf(s.id)).toMatchObject({ generation: 1, lifecycle: "run" });
    expect((await call("GET", `/v1/servers/${s.id}`)).json.planning.mode).toBe("planned");
  });
});

describe("PATCH /v1/servers/{id} roles", () => {
  it("records the new roles and plans from them: a newly added role's agents get their channel's image", async () => {
    const f = await setup();
    const s = await registerServer(f.id, { roles: ["compute"] });
    await call("PUT", `/v1/fleets/${f.id}/channels/base`, { body: { image: "base:2", version: "2" } });
    const res = await call("PATCH", `/v1/servers/${s.id}`, { body: { roles: ["compute", "edge"] } });
    expect(res.status).toBe(200);
    expect(res.json.roles).toEqual(["compute", "edge"]);
    expect(res.json.desired.generation).toBe(2);
    // base keeps the image it runs; logs (new with edge) comes from its channel.
    expect(await agentsOf(s.id)).toEqual(["base=base:1", "logs=logs:1", "s3=s3:1"]);
    const row = await env.DB.prepare("SELECT roles FROM servers WHERE id = ?").bind(s.id).first<string>("roles");
    expect(JSON.parse(row!)).toEqual(["compute", "edge"]);
    // A later change of the edge role now reaches it.
    await call("PUT", `/v1/fleets/${f.id}/roles/edge`, { body: { agents: [{ name: "logs" }, { name: "fw-agent" }] } });
    expect(await agentsOf(s.id)).toEqual(["base=base:1", "fw-agent=fw:1", "logs=logs:1", "s3=s3:1"]);
    expect((await call("PATCH", `/v1/servers/${s.id}`, { body: { roles: ["Bad Role"] } })).status).toBe(400);
  });
});

describe("planner durability", () => {
  it("keeps a mark whose ledger could not be reached, backs it off, and plans it on a later run", async () => {
    const f = await setup();
    const s = await registerServer(f.id, { roles: ["compute"] });
    await env.DB.batch([
      env.DB.prepare("UPDATE role_profiles SET agents = ? WHERE fleet_id = ? AND role = 'compute'").bind(
        JSON.stringify([{ name: "logs" }]),
        f.id,
      ),
      env.DB.prepare("UPDATE fleet_intent SET rev = rev + 1 WHERE fleet_id = ?").bind(f.id),
      env.DB.prepare(
        "INSERT INTO plan_marks (server_id, fleet_id, rev, marked_at) SELECT ?, ?, rev, 0 FROM fleet_intent WHERE fleet_id = ?",
      ).bind(s.id, f.id, f.id),
    ]);
    const { runPlanner } = await import("../src/planner/service");
    const unreachable = {
      ...env,
      LEDGER: new Proxy(env.LEDGER, {
        get(target, prop) {
          if (prop === "get")
            return () => ({ applyPlan: () => Promise.reject(new Error("simulated: ledger unreachable")) });
          const value = Reflect.get(target, prop);
          return typeof value === "function" ? value.bind(target) : value;
        },
      }),
    };
    const failed = await runPlanner(unreachable as typeof env, { fleet: f.id });
    expect(failed).toMatchObject({ servers: 0, failed: 1 });
    const mark = await env.DB.prepare("SELECT attempts, marked_at FROM plan_marks WHERE server_id = ?")
      .bind(s.id)
      .first<any>();
    expect(mark.attempts).toBe(1);
    expect(mark.marked_at).toBeGreaterThan(Date.now());
    expect(await agentsOf(s.id)).toEqual(["base=base:1", "s3=s3:1"]);
    // Not due yet: a run now leaves it alone; once due, it is planned and the mark goes.
    expect((await runPlanner(env, { fleet: f.id })).servers).toBe(0);
    await env.DB.prepare("UPDATE plan_marks SET marked_at = 0 WHERE server_id = ?").bind(s.id).run();
    expect(await runPlanner(env, { fleet: f.id })).toMatchObject({ servers: 1, issued: 1 });
    expect(await agentsOf(s.id)).toEqual(["logs=logs:1"]);
    expect(await env.DB.prepare("SELECT COUNT(*) AS n FROM plan_marks WHERE server_id = ?").bind(s.id).first("n")).toBe(
      0,
    );
  });

  it("never lets a run with older inputs undo a newer one, and keeps a mark newer than what it applied", async () => {
    const f = await setup();
    const s = await registerServer(f.id, { roles: ["compute"] });
    const { planInputsOf } = await import("../src/planner/store");
    const { getDb } = await import("../src/db/client");
    const old = (await planInputsOf(getDb(env.DB), f.id))!;
    await call("PUT", `/v1/fleets/${f.id}/roles/compute`, { body: { agents: [{ name: "logs" }] } });
    expect(await agentsOf(s.id)).toEqual(["logs=logs:1"]);
    const stub = env.LEDGER.get(env.LEDGER.idFromName(s.id));
    const late = await stub.applyPlan(old, { actor: "planner", reason: "late" });
    expect(late).toMatchObject({ ok: true, outcome: "older_inputs" });
    expect(await agentsOf(s.id)).toEqual(["logs=logs:1"]);
  });
});

describe("registration racing an intent change", () => {
  it("re-plans the new server when the fleet's intent moved past the inputs it was planned from", async () => {
    const f = await setup();
    const { planInputsOf } = await import("../src/planner/store");
    const { getDb } = await import("../src/db/client");
    const before = (await planInputsOf(getDb(env.DB), f.id))!.rev;
    const s = await registerServer(f.id, { roles: ["compute"] });
    // The change committed after the server was planned and before its index row existed: no mark.
    await env.DB.batch([
      env.DB.prepare("UPDATE role_profiles SET agents = ? WHERE fleet_id = ? AND role = 'compute'").bind(
        JSON.stringify([{ name: "logs" }]),
        f.id,
      ),
      env.DB.prepare("UPDATE fleet_intent SET rev = rev + 1 WHERE fleet_id = ?").bind(f.id),
    ]);
    const { catchUpPlan } = await import("../src/planner/service");
    expect(await catchUpPlan(env, s.id, f.id, before + 1)).toBeNull();
    expect(await agentsOf(s.id)).toEqual(["base=base:1", "s3=s3:1"]);
    const view = await catchUpPlan(env, s.id, f.id, before);
    expect(view?.desired.generation).toBe(2);
    expect(await agentsOf(s.id)).toEqual(["logs=logs:1"]);
  });
});
