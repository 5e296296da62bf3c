/**
 * Names that hold under races and crashes. A hostname is unique among a fleet's live servers and
 * a fleetlock_id among its servers; both are reserved at the fleet's coordinator before the
 * ledger commits, and a reservation ends by asking the server's ledger, never by the clock alone
 * (src/fleetlock/names.ts). These tests race registrations, kill a workflow between its
 * reservation and its commit, hold a committed ledger's deliveries back, and remove servers.
 */
import { env, runInDurableObject } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import { fleetWithKey, putGroup, registerClients, zincati } from "./fleetlock-helpers";
import {
  breakCoordinator,
  breakD1,
  call,
  createFleet,
  fireTimersNow,
  pendingEffects,
  registerServer,
  uniq,
} from "./helpers";
import { coordinator, ledger } from "./support/objects";

const register = (fleet: string, hostname: string, extra: Record<string, unknown> = {}) =>
  call("POST", "/v1/servers", { body: { fleet, hostname, kind: "managed", ...extra } });
/** The coordinator's claim on a hostname, as stored. */
const claimOf = (fleet: string, name: string) =>
  runInDurableObject(
    coordinator(fleet),
    (_i, state) => state.storage.kv.get<{ server_id: string; until: number | null }>(`hostname:${name}`) ?? null,
  );

describe("a hostname in a fleet", () => {
  it("registered by several requests at once goes to exactly one; the others are 409 hostname_taken", async () => {
    const { id: fleet } = await createFleet();
    const name = `${uniq("race")}.example.com`;
    const answers = await Promise.all(Array.from({ length: 6 }, () => register(fleet, name)));
    const created = answers.filter((a) => a.status === 201);
    expect(created).toHaveLength(1);
    for (const a of answers.filter((x) => x.status !== 201)) {
      expect(a.status).toBe(409);
      expect(a.json.error.code).toBe("hostname_taken");
      expect(a.json.error.message).toContain(name);
    }
    // The name answers with one server, never ambiguous_server.
    const named = await call("GET", `/v1/servers/${name}?fleet=${fleet}`);
    expect(named.status).toBe(200);
    expect(named.json.id).toBe(created[0].json.id);
  });

  it("reserved by a registration that died before its ledger committed is free again once the reservation ends", async () => {
    const { id: fleet } = await createFleet();
    const name = `${uniq("ghost")}.example.com`;
    const ghost = crypto.randomUUID();
    expect(await coordinator(fleet).reserveRegistration(name, null, ghost)).toMatchObject({ ok: true });
    const blocked = await register(fleet, name);
    expect(blocked.status).toBe(409);
    expect(blocked.json.error).toMatchObject({ code: "hostname_taken", details: { server_id: ghost } });
    // Its end: the coordinator asks the ghost's ledger, which holds nothing.
    await fireTimersNow(coordinator(fleet), "hostname:");
    expect(await claimOf(fleet, name)).toBeNull();
    expect((await register(fleet, name)).status).toBe(201);
  });

  it("whose registration committed stays taken after its reservation ends, even while the index has not heard of the server", async () => {
    const { id: fleet } = await createFleet();
    const name = `${uniq("slow")}.example.com`;
    const id = crypto.randomUUID();
    // The server's ledger cannot reach D1: the index shows nothing of it for now.
    const restore = await breakD1(ledger(id));
    try {
      const { registerServer: viaService } = await import("../src/servers/service");
      await viaService(
        env,
        "test",
        { fleet, hostname: name, kind: "managed", roles: [], reboot_group: "default" },
        () => id,
      );
      await fireTimersNow(coordinator(fleet), "hostname:");
      expect(await claimOf(fleet, name)).toEqual({ server_id: id, until: null });
      const second = await register(fleet, name);
      expect(second.status).toBe(409);
      expect(second.json.error).toMatchObject({ code: "hostname_taken", details: { server_id: id } });
    } finally {
      await restore();
    }
  });

  it("is not held by a registration refused for its fleetlock_id: the corrected request goes through at once", async () => {
    const f = await fleetWithKey();
    const [a] = await registerClients(f.fleet, 1);
    const name = `${uniq("retry")}.example.com`;
    const refused = await register(f.fleet, name, { fleetlock_id: a.id });
    expect(refused.json.error.code).toBe("fleetlock_id_taken");
    expect(await claimOf(f.fleet, name)).toBeNull();
    expect((await register(f.fleet, name, { fleetlock_id: `${a.id}-2` })).status).toBe(201);
    // And the other way round: a taken hostname reserves no fleetlock_id.
    const again = await register(f.fleet, name, { fleetlock_id: "spare-id" });
    expect(again.json.error.code).toBe("hostname_taken");
    expect((await register(f.fleet, `x-${name}`, { fleetlock_id: "spare-id" })).status).toBe(201);
  });

  it("is free again once its server is removed", async () => {
    const { id: fleet } = await createFleet();
    const name = `${uniq("gone")}.example.com`;
    const first = await registerServer(fleet, { hostname: name });
    await fireTimersNow(coordinator(fleet), "hostname:");
    expect((await register(fleet, name)).status).toBe(409);
    const removed = await call("POST", `/v1/servers/${first.id}/decommission`, {
      body: { force: true, reason: "replaced" },
    });
    expect(removed.status).toBe(200);
    expect(await claimOf(fleet, name)).toBeNull();
    const again = await register(fleet, name);
    expect(again.status).toBe(201);
    expect((await call("GET", `/v1/servers/${name}?fleet=${fleet}`)).json.id).toBe(again.json.id);
  });
});

describe("an acknowledged fleetlock_id reaches the coordinator", () => {
  it("when its reservation ends before the ledger's identity was delivered: the ledger is asked and the id stays the server's", async () => {
    const f = await fleetWithKey();
    await putGroup(f.fleet, "default", { slots: 1 });
    const [a, b] = await registerClients(f.fleet, 2);
    const restore = await breakCoordinator(ledger(a.serverId));
    try {
      const patch = await call("PATCH", `/v1/servers/${a.serverId}`, { body: { fleetlock_id: "moved-a" } });
      expect(patch.status).toBe(200);
      // Delivery still failing, the reservation's end comes: before, the id was then free for
      // any other server, and the acknowledged change was refused as a conflict when it arrived.
      await fireTimersNow(coordinator(f.fleet), "reservation:");
      const steal = await call("PATCH", `/v1/servers/${b.serverId}`, { body: { fleetlock_id: "moved-a" } });
      expect(steal.status).toBe(409);
      expect(steal.json.error.code).toBe("fleetlock_id_taken");
      expect((await zincati(f.baseUrl, "pre-reboot", a.id)).json.kind).toBe("unknown_client");
    } finally {
      await restore();
    }
    expect((await zincati(f.baseUrl, "pre-reboot", "moved-a")).status).toBe(200);
  });

  it("when the host asks before the ledger's outbox delivered it (a crash held it up): the reserving ledger is asked", async () => {
    const f = await fleetWithKey();
    await putGroup(f.fleet, "default", { slots: 1 });
    const [a] = await registerClients(f.fleet, 1);
    const restore = await breakCoordinator(ledger(a.serverId));
    try {
      expect((await call("PATCH", `/v1/servers/${a.serverId}`, { body: { fleetlock_id: "caught-up" } })).status).toBe(
        200,
      );
      expect(await pendingEffects(ledger(a.serverId))).toBeGreaterThan(0);
    } finally {
      await restore();
    }
    // No alarm ran: the coordinator asked the ledger itself.
    expect((await zincati(f.baseUrl, "pre-reboot", "caught-up")).status).toBe(200);
    expect((await zincati(f.baseUrl, "steady-state", "caught-up")).status).toBe(200);
    expect((await zincati(f.baseUrl, "pre-reboot", a.id)).json.kind).toBe("unknown_client");
  });

  it("asks the reserving ledger only for a caller with the fleet's key, and answers as before (no 500) when that ledger cannot be reached", async () => {
    const f = await fleetWithKey();
    await putGroup(f.fleet, "default", { slots: 1 });
    const [a] = await registerClients(f.fleet, 1);
    const restore = await breakCoordinator(ledger(a.serverId));
    try {
      expect((await call("PATCH", `/v1/servers/${a.serverId}`, { body: { fleetlock_id: "caught-late" } })).status).toBe(
        200,
      );
    } finally {
      await restore();
    }
    let asked = 0;
    let reachable = false;
    await runInDurableObject(coordinator(f.fleet), (instance) => {
      const own = (instance as unknown as { parts: { ask: (id: string) => Promise<unknown> } }).parts;
      const ask = own.ask;
      own.ask = (id) => {
        asked++;
        return reachable ? ask(id) : Promise.reject(new Error("simulated: ledger unreachable"));
      };
    });
    const wrongKey = f.baseUrl.replace(f.key, "x".repeat(f.key.length));
    for (const op of ["pre-reboot", "steady-state"] as const)
      expect((await zincati(wrongKey, op, "caught-late")).json.kind).toBe("unauthorized");
    expect(asked).toBe(0);
    for (const op of ["pre-reboot", "steady-state"] as const) {
      const res = await zincati(f.baseUrl, op, "caught-late");
      expect(res.status).toBe(403);
      expect(res.json.kind).toBe("unknown_client");
    }
    expect(asked).toBe(2);
    reachable = true;
    expect((await zincati(f.baseUrl, "pre-reboot", "caught-late")).status).toBe(200);
  });

  it("by the PATCH's own delivery, even when an earlier identity of the server is waiting out a backoff", async () => {
    const f = await fleetWithKey();
    const [a] = await registerClients(f.fleet, 1);
    const restore = await breakCoordinator(ledger(a.serverId));
    expect((await call("PATCH", `/v1/servers/${a.serverId}`, { body: { fleetlock_id: "first-try" } })).status).toBe(
      200,
    );
    await restore();
    // The failed delivery left its row waiting (backoff); the next PATCH replaces its payload.
    expect((await call("PATCH", `/v1/servers/${a.serverId}`, { body: { fleetlock_id: "second-try" } })).status).toBe(
      200,
    );
    // Delivered before the answer: nothing left, and the coordinator has it without any alarm.
    expect(await pendingEffects(ledger(a.serverId))).toBe(0);
    const client = await runInDurableObject(
      coordinator(f.fleet),
      (_i, state) => state.storage.kv.get("client:second-try") ?? null,
    );
    expect(client).toMatchObject({ server_id: a.serverId });
  });

  it("is refused by a ledger reached after its reservation could have ended (503 reservation_expired), changing nothing", async () => {
    const f = await fleetWithKey();
    const [a] = await registerClients(f.fleet, 1);
    const late = await ledger(a.serverId).setRebootIdentity(
      { fleetlock_id: "too-late" },
      { actor: "test", deadline: Date.now() - 1 },
    );
    expect(late).toMatchObject({ ok: false, code: "reservation_expired" });
    expect((await ledger(a.serverId).view())!.record.fleetlock_id).toBe(a.id);
  });
});
