import { env, evictDurableObject } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import { breakCoordinator, breakD1, call, createFleet, fireTimersNow, registerServer, report } from "./helpers";
import { ledger } from "./support/objects";

const A = { name: "a", image: "a:1", version: "1" };

async function activeServer(
  fleet: string,
  overrides: Record<string, unknown> = {},
  assignments = { units: [] as string[], storage: [] as string[] },
) {
  const s = await registerServer(fleet, overrides);
  await call("PUT", `/v1/servers/${s.id}/desired`, { body: { generation: 2, agents: [A] } });
  await call("PUT", "/v1/agent/inventory", { token: s.token, body: report(2, [A], { assignments }) });
  return s;
}

const server = async (id: string) => (await call("GET", `/v1/servers/${id}`)).json;
const ack = (s: { token: string }, generation: number, extra: Record<string, unknown> = {}) =>
  call("PUT", "/v1/agent/inventory", { token: s.token, body: report(generation, [], extra) });

async function fleetWithLocks() {
  const f = await createFleet({ default_group_slots: 1 });
  const key = await call("POST", `/v1/fleets/${f.id}/fleetlock-key`);
  const path = new URL(key.json.base_url as string).pathname;
  const pre = (id: string) =>
    call("POST", `${path}v1/pre-reboot`, {
      token: null,
      headers: { "fleet-lock-protocol": "true" },
      rawBody: JSON.stringify({ client_params: { id, group: "default" } }),
    });
  return { f, pre };
}

async function indexState(id: string) {
  const row = await env.DB.prepare("SELECT state FROM servers WHERE id = ?").bind(id).first<string>("state");
  const instances = await env.DB.prepare("SELECT COUNT(*) AS n FROM agent_instances WHERE server_id = ?")
    .bind(id)
    .first<number>("n");
  const token = await env.DB.prepare("SELECT revoked_at FROM tokens WHERE id = ?")
    .bind(id)
    .first<number | null>("revoked_at");
  return { state: row, instances, tokenRevoked: token !== null };
}

describe("decommission", () => {
  it("orders terminate (never uninstall) for a managed server, and cleanup on the host's acknowledgement leaves nothing behind", async () => {
    const { f, pre } = await fleetWithLocks();
    const s = await activeServer(f.id, { fleetlock_id: "node-a" });
    expect((await pre("node-a")).status).toBe(200);

    const res = await call("POST", `/v1/servers/${s.id}/decommission`);
    expect(res.status).toBe(200);
    expect(res.json).toMatchObject({
      state: "decommissioning",
      desired: { generation: 3, lifecycle: "terminate", agents: [] },
    });
    expect(res.json.lifecycle).toMatchObject({ order: "terminate", generation: 3, cleanup_from: null });
    // The host polls, sees the order, stops its agents and says so.
    const poll = await call("GET", "/v1/agent/desired", { token: s.token });
    expect(poll.json).toMatchObject({ generation: 3, lifecycle: "terminate" });
    // A desired PUT cannot change the order.
    const put = await call("PUT", `/v1/servers/${s.id}/desired`, { body: { generation: 4, agents: [A] } });
    expect(put.json.error.code).toBe("lifecycle_change_refused");

    expect((await ack(s, 3)).status).toBe(200);
    await fireTimersNow(ledger(s.id));
    const after = await server(s.id);
    expect(after.state).toBe("removed");
    expect(after.lifecycle.cleanup_done).toEqual(["index", "coordinator"]);
    expect(await indexState(s.id)).toEqual({ state: "removed", instances: 0, tokenRevoked: true });
    // A tombstone has no staleness deadline: it never reads (nor is swept) as stale.
    const staleAt = await env.DB.prepare("SELECT stale_at FROM servers WHERE id = ?").bind(s.id).first("stale_at");
    expect(staleAt).toBeNull();
    expect((await call("GET", "/v1/agent/desired", { token: s.token })).status).toBe(401);
    // It left the semaphore and freed its fleetlock_id: another server takes both.
    const groups = await call("GET", `/v1/fleets/${f.id}/reboot-groups/default`);
    expect(groups.json.holders).toEqual([]);
    expect((await registerServer(f.id, { fleetlock_id: "node-a" })).id).toBeTruthy();
    // Tombstones: listed only when asked for.
    expect((await call("GET", `/v1/servers?fleet=${f.id}`)).json.items.map((x: any) => x.id)).not.toContain(s.id);
    expect((await call("GET", `/v1/servers?fleet=${f.id}&state=removed`)).json.items.map((x: any) => x.id)).toEqual([
      s.id,
    ]);
    const audit = await call("GET", `/v1/audit?target=server:${s.id}`);
    expect(audit.json.items.map((a: any) => a.action)).toEqual(
      expect.arrayContaining(["server.decommission", "server.decommission.acknowledged", "server.removed"]),
    );
  });

  it("orders uninstall for a manual server whose last report shows nothing assigned or attached", async () => {
    const f = await createFleet();
    const s = await activeServer(f.id, { kind: "manual" });
    const res = await call("POST", `/v1/servers/${s.id}/decommission`, { body: {} });
    expect(res.json.desired).toMatchObject({ lifecycle: "uninstall", agents: [] });
  });

  it("refuses uninstall (409 uninstall_blocked, naming each unit and attachment) for a manual server that carries work, and changes nothing", async () => {
    const f = await createFleet();
    const s = await activeServer(f.id, { kind: "manual" }, { units: ["web/0", "db/1"], storage: ["vol-9"] });
    const res = await call("POST", `/v1/servers/${s.id}/decommission`);
    expect(res.status).toBe(409);
    expect(res.json.error).toMatchObject({
      code: "uninstall_blocked",
      details: { units: ["web/0", "db/1"], storage: ["vol-9"] },
    });
    expect(await server(s.id)).toMatchObject({ state: "active", desired_generation: 2, desired: { lifecycle: "run" } });
    // A manual server that never reported cannot show it is empty either.
    const silent = await registerServer(f.id, { kind: "manual" });
    expect((await call("POST", `/v1/servers/${silent.id}/decommission`)).json.error.code).toBe("uninstall_blocked");
  });

  it("refuses uninstall for a manual server whose only tie is attached storage (no unit), naming it, and changes nothing", async () => {
    const f = await createFleet();
    const s = await activeServer(f.id, { kind: "manual" }, { units: [], storage: ["vol-3"] });
    const res = await call("POST", `/v1/servers/${s.id}/decommission`);
    expect(res.status).toBe(409);
    expect(res.json.error).toMatchObject({ code: "uninstall_blocked", details: { units: [], storage: ["vol-3"] } });
    expect(await server(s.id)).toMatchObject({ state: "active", desired_generation: 2, desired: { lifecycle: "run" } });
  });

  it("does not take a host's error (or agents still listed) as the acknowledgement", async () => {
    const f = await createFleet();
    const s = await activeServer(f.id);
    await call("POST", `/v1/servers/${s.id}/decommission`);
    await call("PUT", "/v1/agent/inventory", {
      token: s.token,
      body: report(3, [], { errors: [{ agent: "a", op: "remove", message: "stuck" }] }),
    });
    await call("PUT", "/v1/agent/inventory", { token: s.token, body: report(3, [A]) });
    await fireTimersNow(ledger(s.id));
    expect(await server(s.id)).toMatchObject({ state: "decommissioning", lifecycle: { cleanup_from: null } });
  });

  it("can be cancelled until the host acknowledges: the next generation orders run again with the previous agents", async () => {
    const f = await createFleet();
    const s = await activeServer(f.id);
    await call("POST", `/v1/servers/${s.id}/decommission`);
    const res = await call("POST", `/v1/servers/${s.id}/decommission/cancel`);
    expect(res.status).toBe(200);
    expect(res.json).toMatchObject({ state: "active", lifecycle: null, desired: { generation: 4, lifecycle: "run" } });
    expect(res.json.desired.agents.map((a: any) => a.name)).toEqual(["a"]);
    expect((await call("POST", `/v1/servers/${s.id}/decommission/cancel`)).json.error.code).toBe("not_decommissioning");

    await call("POST", `/v1/servers/${s.id}/decommission`);
    await breakD1(ledger(s.id));
    await ack(s, 5);
    const late = await call("POST", `/v1/servers/${s.id}/decommission/cancel`);
    expect(late.status).toBe(409);
    expect(late.json.error.code).toBe("decommission_acknowledged");
  });

  it("finishes cleanup across a D1 outage, an unreachable coordinator and an eviction mid-way, and only then is removed", async () => {
    const { f, pre } = await fleetWithLocks();
    const s = await activeServer(f.id, { fleetlock_id: "node-b" });
    expect((await pre("node-b")).status).toBe(200);
    await call("POST", `/v1/servers/${s.id}/decommission`);
    const restoreD1 = await breakD1(ledger(s.id));
    await ack(s, 3);
    await fireTimersNow(ledger(s.id));
    // Acknowledged, token stopped at once, but nothing else done: not removed.
    expect((await call("GET", "/v1/agent/desired", { token: s.token })).status).toBe(401);
    expect(await server(s.id)).toMatchObject({ state: "decommissioning", lifecycle: { cleanup_done: [] } });
    expect((await indexState(s.id)).instances).toBe(1);

    await restoreD1();
    await breakCoordinator(ledger(s.id));
    await fireTimersNow(ledger(s.id));
    expect(await server(s.id)).toMatchObject({ state: "decommissioning", lifecycle: { cleanup_done: ["index"] } });
    expect((await call("GET", `/v1/fleets/${f.id}/reboot-groups/default`)).json.holders).toHaveLength(1);

    await evictDurableObject(ledger(s.id));
    await fireTimersNow(ledger(s.id));
    expect(await server(s.id)).toMatchObject({ state: "removed" });
    expect(await indexState(s.id)).toEqual({ state: "removed", instances: 0, tokenRevoked: true });
    expect((await call("GET", `/v1/fleets/${f.id}/reboot-groups/default`)).json.holders).toEqual([]);
  });

  it("force removes a dead host without its acknowledgement: admin only, reason required, same cleanup, audited with the reason", async () => {
    const f = await createFleet();
    const s = await activeServer(f.id);
    const writer = (await call("POST", "/v1/tokens", { body: { name: "w", scope: "write" } })).json.token;
    expect(
      (await call("POST", `/v1/servers/${s.id}/decommission`, { token: writer, body: { force: true, reason: "dead" } }))
        .status,
    ).toBe(403);
    expect((await call("POST", `/v1/servers/${s.id}/decommission`, { body: { force: true } })).json.error.code).toBe(
      "validation_failed",
    );
    expect((await server(s.id)).state).toBe("active");

    const res = await call("POST", `/v1/servers/${s.id}/decommission`, {
      body: { force: true, reason: "PSU dead, host gone" },
    });
    expect(res.status).toBe(200);
    await fireTimersNow(ledger(s.id));
    expect(await server(s.id)).toMatchObject({
      state: "removed",
      lifecycle: { forced: { reason: "PSU dead, host gone" } },
    });
    expect(await indexState(s.id)).toEqual({ state: "removed", instances: 0, tokenRevoked: true });
    const audit = await call("GET", `/v1/audit?target=server:${s.id}`);
    expect(audit.json.items.find((a: any) => a.action === "server.decommission.force").details).toEqual({
      reason: "PSU dead, host gone",
    });
    // Repeating changes nothing; the server cannot be decommissioned again or changed.
    expect(
      (await call("POST", `/v1/servers/${s.id}/decommission`, { body: { force: true, reason: "again" } })).status,
    ).toBe(200);
    expect((await call("POST", `/v1/servers/${s.id}/decommission`)).json.error.code).toBe("server_removed");
  });
});

describe("decommission of a server whose token was revoked before", () => {
  it("keeps the revocation's own time on the token row: the cleanup does not move it to its own", async () => {
    const f = await createFleet();
    const s = await activeServer(f.id);
    const revoked = await call("DELETE", `/v1/tokens/${s.id}`);
    expect(revoked.status).toBe(200);
    await fireTimersNow(ledger(s.id));
    await new Promise((r) => setTimeout(r, 20));
    expect(
      (await call("POST", `/v1/servers/${s.id}/decommission`, { body: { force: true, reason: "host gone" } })).status,
    ).toBe(200);
    await fireTimersNow(ledger(s.id));
    expect((await server(s.id)).state).toBe("removed");
    const row = await env.DB.prepare("SELECT revoked_at FROM tokens WHERE id = ?")
      .bind(s.id)
      .first<number>("revoked_at");
    expect(new Date(row!).toISOString()).toBe(revoked.json.revoked_at);
    // The ledger and D1 answer one time.
    expect((await call("DELETE", `/v1/tokens/${s.id}`)).json.revoked_at).toBe(revoked.json.revoked_at);
  });
});

describe("server token rotation", () => {
  it("answers a new token once; the old one stops at once, a parked poll included", async () => {
    const f = await createFleet();
    const s = await activeServer(f.id);
    const parked = call("GET", "/v1/agent/desired?wait=5", { token: s.token, headers: { "If-None-Match": '"2"' } });
    await new Promise((r) => setTimeout(r, 100));
    const res = await call("POST", `/v1/servers/${s.id}/token`);
    expect(res.status).toBe(200);
    expect(res.json.token).toMatch(/^hms\./);
    expect((await parked).status).toBe(401);
    expect((await call("GET", "/v1/agent/desired", { token: s.token })).status).toBe(401);
    expect((await call("GET", "/v1/agent/desired", { token: res.json.token })).status).toBe(200);
    expect((await call("POST", `/v1/servers/${crypto.randomUUID()}/token`)).status).toBe(404);
  });

  it("tells concurrent rotations that lost so (409 token_rotated): every token answered 200 works until rotated again", async () => {
    const f = await createFleet();
    const s = await activeServer(f.id);
    const answers = await Promise.all(Array.from({ length: 5 }, () => call("POST", `/v1/servers/${s.id}/token`)));
    const won = answers.filter((a) => a.status === 200);
    const lost = answers.filter((a) => a.status !== 200);
    for (const a of lost) {
      expect(a.status).toBe(409);
      expect(a.json.error.code).toBe("token_rotated");
      expect(a.json.error.message).toMatch(/another request/);
    }
    // Rotations that each saw the one before are all winners, one after the other; ones that ran
    // from the same token cannot all be: at most one of them commits.
    expect(won.length).toBeGreaterThanOrEqual(1);
    expect(won.length).toBeLessThan(5);
    const works = async (token: string) => (await call("GET", "/v1/agent/desired", { token })).status === 200;
    const working = [];
    for (const a of won) if (await works(a.json.token)) working.push(a.json.token);
    expect(working).toHaveLength(1);
    expect(await works(s.token)).toBe(false);
  });

  it("refuses a rotation from a token that is no longer the server's, and keeps the current one", async () => {
    const f = await createFleet();
    const s = await activeServer(f.id);
    const stub = ledger(s.id);
    const base = await stub.tokenHash();
    expect(base).toMatch(/^[0-9a-f]{64}$/);
    expect(await stub.rotateToken("a".repeat(64), "test", base!)).toMatchObject({ ok: true });
    const late = await stub.rotateToken("b".repeat(64), "test", base!);
    expect(late).toMatchObject({ ok: false, code: "token_rotated" });
    expect(await stub.tokenHash()).toBe("a".repeat(64));
    expect(await ledger(crypto.randomUUID()).tokenHash()).toBeNull();
  });
});
