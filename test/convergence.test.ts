/**
 * One truth per fact: the object that owns a fact commits it first and its outbox brings the D1
 * index, the audit log and the fleet's coordinator along. These tests fail each step in turn
 * (an unreachable binding, an eviction between commit and delivery) and check that the bindings
 * agree again without anyone's help.
 */
import { env, evictDurableObject, runInDurableObject } from "cloudflare:test";
import { and, eq } from "drizzle-orm";
import { describe, expect, it } from "vitest";
import { getDb } from "../src/db/client";
import { auditLog, servers, tokens } from "../src/db/schema";
import { RESERVATION_TTL_MS } from "../src/fleetlock/identity";
import { Scheduler } from "../src/objects/kit/scheduler";
import { registerServer as registerViaService } from "../src/servers/service";
import { fleetWithKey, getGroup, putGroup, registerClients, zincati } from "./fleetlock-helpers";
import { breakCoordinator, breakD1, call, fireTimersNow, pendingEffects, report } from "./helpers";
import { coordinator, ledger } from "./support/objects";

const db = () => getDb(env.DB);
/** The coordinator's registry entry for a FleetLock id (read without asking anyone: no catch-up). */
const registered = (fleet: string, id: string) =>
  runInDurableObject(coordinator(fleet), (_i, state) => state.storage.kv.get(`client:${id}`) ?? null);
const indexRow = async (id: string) => (await db().select().from(servers).where(eq(servers.id, id)))[0];
const auditRows = (target: string, action: string) =>
  db()
    .select()
    .from(auditLog)
    .where(and(eq(auditLog.target, target), eq(auditLog.action, action)));

describe("registration converges after a failure at every step", () => {
  it("a crash after the fleetlock_id reservation leaves nothing: the reservation expires and the id is free again", async () => {
    const f = await fleetWithKey();
    const ghost = crypto.randomUUID();
    // The workflow reserved the id, then died before the ledger committed anything.
    expect(await coordinator(f.fleet).reserveClientId("node-ghost", ghost)).toMatchObject({ ok: true });
    const blocked = await call("POST", "/v1/servers", {
      body: { fleet: f.fleet, hostname: "other.example.com", kind: "managed", fleetlock_id: "node-ghost" },
    });
    expect(blocked.status).toBe(409);
    expect(blocked.json.error.code).toBe("fleetlock_id_taken");
    // No index row, no ledger, nothing FleetLock would grant to.
    expect(await indexRow(ghost)).toBeUndefined();
    expect(await ledger(ghost).view()).toBeNull();
    expect((await zincati(f.baseUrl, "pre-reboot", "node-ghost")).json.kind).toBe("unknown_client");

    await runInDurableObject(coordinator(f.fleet), (_i, state) => {
      // The reservation's timer, RESERVATION_TTL_MS later.
      const due = state.storage.sql
        .exec<{ due_at: number }>("SELECT due_at FROM _timers WHERE name = 'reservation:node-ghost'")
        .one().due_at;
      expect(due).toBeGreaterThan(Date.now() + RESERVATION_TTL_MS - 5_000);
    });
    await fireTimersNow(coordinator(f.fleet));
    const retry = await call("POST", "/v1/servers", {
      body: { fleet: f.fleet, hostname: "other.example.com", kind: "managed", fleetlock_id: "node-ghost" },
    });
    expect(retry.status).toBe(201);
  });

  it("a ledger committed while D1 and the coordinator were unreachable brings its index row, token row, audit row and identity along after an eviction", async () => {
    const f = await fleetWithKey();
    await putGroup(f.fleet, "default", { slots: 1 });
    const id = crypto.randomUUID();
    // Reach the server's ledger before it exists, and cut it off from D1 and the coordinator.
    const restoreD1 = await breakD1(ledger(id));
    const restoreCoordinator = await breakCoordinator(ledger(id));

    const { view, token } = await registerViaService(
      env,
      "token:test",
      {
        fleet: f.fleet,
        hostname: "late.example.com",
        kind: "managed",
        roles: [],
        reboot_group: "default",
        fleetlock_id: "late-1",
      },
      () => id,
    );
    expect(view.record.id).toBe(id);
    expect(await indexRow(id)).toBeUndefined();
    expect(await registered(f.fleet, "late-1")).toBeNull();
    expect(await pendingEffects(ledger(id))).toBe(6); // index, token, audit, identity, member, webhook event

    // The object dies before any delivery; its successor has the real bindings.
    await evictDurableObject(ledger(id));
    void restoreD1;
    void restoreCoordinator;
    expect(await fireTimersNow(ledger(id))).toBe(true);

    expect(await pendingEffects(ledger(id))).toBe(0);
    expect(await indexRow(id)).toMatchObject({ id, fleetlockId: "late-1", state: "provisioning" });
    expect((await db().select().from(tokens).where(eq(tokens.id, id)))[0]).toMatchObject({
      kind: "server",
      revokedAt: null,
    });
    expect(await auditRows(`server:${id}`, "server.register")).toHaveLength(1);
    expect((await zincati(f.baseUrl, "pre-reboot", "late-1")).status).toBe(200);
    expect((await getGroup(f.fleet, "default")).holders[0].server).toEqual({ id, hostname: "late.example.com" });
    // The token works against the ledger, which never needed D1.
    expect((await call("GET", "/v1/agent/desired", { token })).status).toBe(200);
  });

  it("a registration the coordinator refuses (id taken) writes no ledger and no row", async () => {
    const f = await fleetWithKey();
    const [a] = await registerClients(f.fleet, 1);
    const id = crypto.randomUUID();
    await expect(
      registerViaService(
        env,
        "token:test",
        {
          fleet: f.fleet,
          hostname: "dup.example.com",
          kind: "managed",
          roles: [],
          reboot_group: "default",
          fleetlock_id: a.id,
        },
        () => id,
      ),
    ).rejects.toMatchObject({ code: "fleetlock_id_taken" });
    expect(await ledger(id).view()).toBeNull();
    expect(await indexRow(id)).toBeUndefined();
  });
});

describe("PATCH of a server's FleetLock identity", () => {
  it("never lets two servers share a fleetlock_id while the first one's host keeps reporting", async () => {
    const f = await fleetWithKey();
    await putGroup(f.fleet, "default", { slots: 2 });
    const [a] = await registerClients(f.fleet, 1);
    const agents = [{ name: "compute", image: "compute:1" }];
    await call("PUT", `/v1/servers/${a.serverId}/desired`, {
      body: { generation: 2, agents: agents.map((x) => ({ ...x, version: "1" })) },
    });
    for (let round = 0; round < 3; round++) {
      const oldId = round === 0 ? a.id : `a-${round - 1}`;
      const newId = `a-${round}`;
      // The host reports (changing content each time) while the operator moves its id and
      // another server registers with the id it gave up.
      const results = await Promise.all([
        call("PUT", "/v1/agent/inventory", { token: a.token, body: report(2, agents, { boot_id: `b-${round}` }) }),
        call("PATCH", `/v1/servers/${a.serverId}`, { body: { fleetlock_id: newId } }),
        call("PUT", "/v1/agent/inventory", { token: a.token, body: report(2, agents, { boot_id: `c-${round}` }) }),
      ]);
      expect(results.map((r) => r.status)).toEqual([200, 200, 200]);
      const other = await call("POST", "/v1/servers", {
        body: { fleet: f.fleet, hostname: `other-${round}.example.com`, kind: "managed", fleetlock_id: oldId },
      });
      expect(other.status).toBe(201);
      // Each id reaches exactly one server: in the index, in the ledger and in the coordinator.
      expect((await indexRow(a.serverId)).fleetlockId).toBe(newId);
      expect((await indexRow(other.json.id)).fleetlockId).toBe(oldId);
      const rows = await db().select().from(servers).where(eq(servers.fleetId, f.fleet));
      const ids = rows.map((r) => r.fleetlockId).filter(Boolean);
      expect(new Set(ids).size).toBe(ids.length);
      expect((await zincati(f.baseUrl, "pre-reboot", newId)).status).toBe(200);
      expect((await zincati(f.baseUrl, "pre-reboot", oldId)).status).toBe(200);
      const holders = (await getGroup(f.fleet, "default")).holders;
      expect(holders.map((h) => h.server!.id).sort()).toEqual([a.serverId, other.json.id].sort());
      await zincati(f.baseUrl, "steady-state", newId);
      await zincati(f.baseUrl, "steady-state", oldId);
    }
    expect(await pendingEffects(ledger(a.serverId))).toBe(0);
  });

  it("a PATCH whose ledger write never happened leaves the old id working and the new one reserved only until it expires", async () => {
    const f = await fleetWithKey();
    await putGroup(f.fleet, "default", { slots: 1 });
    const [a] = await registerClients(f.fleet, 1);
    // The workflow reserved the new id for the server, then died before the ledger committed.
    expect(await coordinator(f.fleet).reserveClientId("renamed", a.serverId)).toMatchObject({ ok: true });
    expect((await zincati(f.baseUrl, "pre-reboot", a.id)).status).toBe(200);
    expect((await zincati(f.baseUrl, "steady-state", a.id)).status).toBe(200);
    expect((await zincati(f.baseUrl, "pre-reboot", "renamed")).json.kind).toBe("unknown_client");
    // The same PATCH, retried, goes through: the reservation is already the server's.
    expect((await call("PATCH", `/v1/servers/${a.serverId}`, { body: { fleetlock_id: "renamed" } })).status).toBe(200);
    expect((await zincati(f.baseUrl, "pre-reboot", "renamed")).status).toBe(200);
    expect((await indexRow(a.serverId)).fleetlockId).toBe("renamed");
  });
});

describe("an object waking after a crash", () => {
  /**
   * The window behind lost fleetlock_id changes: killed between the runtime dropping an
   * alarm that had fired and the object's own record of it, an object reads back an alarm time in
   * the past that nothing will fire at. Trusting it, the scheduler never set another alarm, so an
   * identity whose first delivery failed waited in the outbox for the ledger's next write.
   */
  const storageWithStaleAlarm = (storage: DurableObjectStorage, stale: number, set: number[]) =>
    new Proxy(storage, {
      get(target, prop) {
        if (prop === "getAlarm") return async () => stale;
        if (prop === "setAlarm") return async (at: number) => void set.push(at);
        const v = Reflect.get(target, prop);
        return typeof v === "function" ? v.bind(target) : v;
      },
    });

  it("sets its alarm again when the stored one is already past, so the outbox's retries still run", async () => {
    await runInDurableObject(ledger(crypto.randomUUID()), async (_i, state) => {
      const set: number[] = [];
      const s = new Scheduler(storageWithStaleAlarm(state.storage, Date.now() - 60_000, set));
      const due = Date.now() + 1_000;
      s.schedule("outbox", due);
      await s.arm();
      expect(set).toEqual([due]);
    });
  });

  it("leaves a stored alarm that is still ahead and earlier than needed alone (it will fire)", async () => {
    await runInDurableObject(ledger(crypto.randomUUID()), async (_i, state) => {
      const set: number[] = [];
      const s = new Scheduler(storageWithStaleAlarm(state.storage, Date.now() + 5_000, set));
      s.schedule("outbox", Date.now() + 60_000);
      await s.arm();
      expect(set).toEqual([]);
    });
  });

  it("delivers a PATCHed fleetlock_id whose first delivery failed once the ledger wakes again, with no other write", async () => {
    const f = await fleetWithKey();
    await putGroup(f.fleet, "default", { slots: 1 });
    const [a] = await registerClients(f.fleet, 1);
    const restore = await breakCoordinator(ledger(a.serverId));
    expect((await call("PATCH", `/v1/servers/${a.serverId}`, { body: { fleetlock_id: "after-crash" } })).status).toBe(
      200,
    );
    expect(await registered(f.fleet, "after-crash")).toBeNull();
    await evictDurableObject(ledger(a.serverId));
    void restore;
    // Only reads from here on: the ledger's own alarm brings the identity to the coordinator.
    expect((await call("GET", `/v1/servers/${a.serverId}`)).json.fleetlock_id).toBe("after-crash");
    expect(await fireTimersNow(ledger(a.serverId))).toBe(true);
    expect(await registered(f.fleet, "after-crash")).toMatchObject({ server_id: a.serverId });
    expect((await zincati(f.baseUrl, "pre-reboot", "after-crash")).status).toBe(200);
    expect(await pendingEffects(ledger(a.serverId))).toBe(0);
  });
});

describe("PATCH of a removed server", () => {
  it("is refused without reserving the id, which another server can take at once", async () => {
    const f = await fleetWithKey();
    const [a] = await registerClients(f.fleet, 1);
    const removed = await call("POST", `/v1/servers/${a.serverId}/decommission`, {
      body: { force: true, reason: "gone" },
    });
    expect(removed.status).toBe(200);
    await fireTimersNow(ledger(a.serverId)); // the cleanup steps
    expect((await call("GET", `/v1/servers/${a.serverId}`)).json.state).toBe("removed");
    const res = await call("PATCH", `/v1/servers/${a.serverId}`, { body: { fleetlock_id: "wanted" } });
    expect(res.status).toBe(409);
    expect(res.json.error.code).toBe("server_removed");
    const other = await call("POST", "/v1/servers", {
      body: { fleet: f.fleet, hostname: "wanted.example.com", kind: "managed", fleetlock_id: "wanted" },
    });
    expect(other.status, JSON.stringify(other.json)).toBe(201);
  });
});

describe("desired PUT", () => {
  it("reaches the index after the ledger is evicted between commit and delivery", async () => {
    const f = await fleetWithKey();
    const [a] = await registerClients(f.fleet, 1);
    const restore = await breakD1(ledger(a.serverId));
    const put = await call("PUT", `/v1/servers/${a.serverId}/desired`, {
      body: { generation: 2, agents: [{ name: "logs", image: "logs:2", version: "2" }] },
    });
    expect(put.status).toBe(200);
    expect((await indexRow(a.serverId)).desiredGeneration).toBe(1);
    await evictDurableObject(ledger(a.serverId));
    void restore;
    expect(await fireTimersNow(ledger(a.serverId))).toBe(true);
    expect((await indexRow(a.serverId)).desiredGeneration).toBe(2);
    const instances = await call("GET", `/v1/instances?server=${a.serverId}`);
    expect(instances.json.items.map((i: any) => i.desired.image)).toEqual(["logs:2"]);
  });

  it("delivers the projection and the audit row exactly once after D1 comes back, however many retries failed", async () => {
    const f = await fleetWithKey();
    const [a] = await registerClients(f.fleet, 1);
    const restore = await breakD1(ledger(a.serverId));
    for (const generation of [2, 3]) {
      const put = await call("PUT", `/v1/servers/${a.serverId}/desired`, {
        body: { generation, agents: [{ name: "logs", image: `logs:${generation}`, version: "1" }] },
      });
      expect(put.status).toBe(200);
    }
    await fireTimersNow(ledger(a.serverId));
    await fireTimersNow(ledger(a.serverId));
    expect(await auditRows(`server:${a.serverId}`, "server.desired.put")).toHaveLength(0);
    await restore();
    await fireTimersNow(ledger(a.serverId));
    await fireTimersNow(ledger(a.serverId));
    const audits = await auditRows(`server:${a.serverId}`, "server.desired.put");
    expect(audits.map((r) => (r.details as any).generation).sort()).toEqual([2, 3]);
    expect((await indexRow(a.serverId)).desiredGeneration).toBe(3);
    expect(await pendingEffects(ledger(a.serverId))).toBe(0);
  });
});

describe("host grants and releases", () => {
  it("are audited from the coordinator's outbox, even when D1 refused them at first and the coordinator was evicted", async () => {
    const f = await fleetWithKey();
    await putGroup(f.fleet, "default", { slots: 1 });
    const [a] = await registerClients(f.fleet, 1);
    const restore = await breakD1(coordinator(f.fleet));
    expect((await zincati(f.baseUrl, "pre-reboot", a.id)).status).toBe(200);
    expect((await zincati(f.baseUrl, "steady-state", a.id)).status).toBe(200);
    await evictDurableObject(coordinator(f.fleet));
    void restore;
    await fireTimersNow(coordinator(f.fleet));
    const target = `fleet:${f.fleet}`;
    expect(await auditRows(target, "fleetlock.grant")).toHaveLength(1);
    expect(await auditRows(target, "fleetlock.release")).toHaveLength(1);
    expect((await auditRows(target, "fleetlock.grant"))[0].actor).toBe(`server:${a.serverId}`);
  });
});

describe("token revocation", () => {
  it("answers a poll parked before the revocation with 401, not with the next config", async () => {
    const f = await fleetWithKey();
    const [a] = await registerClients(f.fleet, 1);
    const parked = call("GET", "/v1/agent/desired?wait=10", { token: a.token, headers: { "If-None-Match": '"1"' } });
    await new Promise((r) => setTimeout(r, 100));
    expect((await call("DELETE", `/v1/tokens/${a.serverId}`)).status).toBe(200);
    await call("PUT", `/v1/servers/${a.serverId}/desired`, {
      body: { generation: 2, agents: [{ name: "logs", image: "logs:2", version: "2" }] },
    });
    const res = await parked;
    expect(res.status).toBe(401);
    expect(res.json.error.code).toBe("unauthorized");
    const row = (await db().select().from(tokens).where(eq(tokens.id, a.serverId)))[0];
    expect(row.revokedAt).not.toBeNull();
    expect(await auditRows(`token:${a.serverId}`, "token.revoke")).toHaveLength(1);
  });
});
