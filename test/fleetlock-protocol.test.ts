import { describe, expect, it } from "vitest";
import { curl, fleetWithKey, getGroup, putGroup, registerClients, zincati } from "./fleetlock-helpers";

describe("FleetLock protocol, as Zincati and curl speak it", () => {
  it("grants pre-reboot to a Zincati-shaped request (no Content-Type, pretty body, trailing-slash base_url)", async () => {
    const f = await fleetWithKey();
    expect(f.baseUrl).toMatch(new RegExp(`^https://hm\\.test/fleetlock/${f.fleet}/[A-Za-z0-9_-]{43}/$`));
    await putGroup(f.fleet, "default", { slots: 1 });
    const [c] = await registerClients(f.fleet, 1);
    const res = await zincati(f.baseUrl, "pre-reboot", c.id);
    expect(res.status).toBe(200);
    const g = await getGroup(f.fleet, "default");
    expect(g.holders.map((h) => h.id)).toEqual([c.id]);
    expect(g.holders[0].server).toEqual({ id: c.serverId, hostname: c.hostname });
    expect(Date.parse(g.holders[0].granted_at)).toBeGreaterThan(0);
  });

  it("accepts curl-shaped requests (form Content-Type, compact body) and releases on steady-state", async () => {
    const f = await fleetWithKey();
    await putGroup(f.fleet, "default", { slots: 1 });
    const [c] = await registerClients(f.fleet, 1);
    expect((await curl(f.baseUrl, "pre-reboot", c.id)).status).toBe(200);
    const res = await curl(f.baseUrl, "steady-state", c.id);
    expect(res.status).toBe(200);
    expect(res.json).toEqual({ released: true });
    expect((await getGroup(f.fleet, "default")).holders).toEqual([]);
  });
});

import { env, evictDurableObject, runInDurableObject } from "cloudflare:test";
import { breakCoordinator, call, fireTimersNow, pendingEffects, report } from "./helpers";
import type { GroupState } from "../src/fleetlock/semaphore";
import { coordinator } from "./support/objects";

const holderIds = async (fleet: string, group = "default") => (await getGroup(fleet, group)).holders.map((h) => h.id);

describe("semaphore over the protocol", () => {
  it("is recursive: a second pre-reboot by the holder succeeds and keeps the original grant", async () => {
    const f = await fleetWithKey();
    await putGroup(f.fleet, "default", { slots: 1 });
    const [a] = await registerClients(f.fleet, 1);
    expect((await zincati(f.baseUrl, "pre-reboot", a.id)).status).toBe(200);
    const first = (await getGroup(f.fleet, "default")).holders[0].granted_at;
    expect((await zincati(f.baseUrl, "pre-reboot", a.id)).status).toBe(200);
    const g = await getGroup(f.fleet, "default");
    expect(g.holders).toHaveLength(1);
    expect(g.holders[0].granted_at).toBe(first);
  });

  it("answers unbalanced steady-state with 200 whether or not anything is held", async () => {
    const f = await fleetWithKey();
    await putGroup(f.fleet, "default", { slots: 1 });
    const [a] = await registerClients(f.fleet, 1);
    const before = await zincati(f.baseUrl, "steady-state", a.id);
    expect(before).toMatchObject({ status: 200, json: { released: false } });
    await zincati(f.baseUrl, "pre-reboot", a.id);
    expect((await zincati(f.baseUrl, "steady-state", a.id)).json).toEqual({ released: true });
    expect(await zincati(f.baseUrl, "steady-state", a.id)).toMatchObject({ status: 200, json: { released: false } });
  });

  it("orders grants across slots: the first k win, a freed slot goes to the next requester", async () => {
    const f = await fleetWithKey();
    await putGroup(f.fleet, "default", { slots: 2 });
    const [a, b, c, d] = await registerClients(f.fleet, 4);
    expect((await zincati(f.baseUrl, "pre-reboot", a.id)).status).toBe(200);
    expect((await zincati(f.baseUrl, "pre-reboot", b.id)).status).toBe(200);
    const full = await zincati(f.baseUrl, "pre-reboot", c.id);
    expect(full.status).toBe(409);
    expect(full.json.kind).toBe("semaphore_full");
    expect(full.json.value).toMatch(/2 slot/);
    await zincati(f.baseUrl, "steady-state", a.id);
    expect((await zincati(f.baseUrl, "pre-reboot", c.id)).status).toBe(200);
    expect((await zincati(f.baseUrl, "pre-reboot", d.id)).json.kind).toBe("semaphore_full");
    expect(await holderIds(f.fleet)).toEqual([b.id, c.id]);
  });

  it("grants exactly k of 50 concurrent pre-reboots, refuses the rest with semaphore_full, and keeps that over release-and-regrant cycles", async () => {
    const K = 5;
    const f = await fleetWithKey({ allow_unknown_ids: true });
    await putGroup(f.fleet, "workers", { slots: K });
    const ids = Array.from({ length: 50 }, (_, i) => `host-${i}-${crypto.randomUUID()}`);
    for (let cycle = 0; cycle < 4; cycle++) {
      const results = await Promise.all(ids.map((id) => zincati(f.baseUrl, "pre-reboot", id, "workers")));
      const granted = ids.filter((_, i) => results[i].status === 200);
      const refused = results.filter((r) => r.status !== 200);
      expect(granted).toHaveLength(K);
      expect(refused).toHaveLength(50 - K);
      for (const r of refused) expect(r).toMatchObject({ status: 409, json: { kind: "semaphore_full" } });
      expect(new Set(await holderIds(f.fleet, "workers"))).toEqual(new Set(granted));
      // Release concurrently with a new wave of requests from everyone else: holders never exceed K.
      const others = ids.filter((id) => !granted.includes(id));
      await Promise.all([
        ...granted.map((id) => zincati(f.baseUrl, "steady-state", id, "workers")),
        ...others.map((id) => zincati(f.baseUrl, "pre-reboot", id, "workers")),
      ]);
      const after = await holderIds(f.fleet, "workers");
      expect(after.length).toBeLessThanOrEqual(K);
      expect(after.some((id) => granted.includes(id))).toBe(false);
      await Promise.all(after.map((id) => zincati(f.baseUrl, "steady-state", id, "workers")));
      expect(await holderIds(f.fleet, "workers")).toEqual([]);
    }
  });

  it("keeps a grant across eviction of the coordinator, and releases it afterwards", async () => {
    const f = await fleetWithKey();
    await putGroup(f.fleet, "default", { slots: 1 });
    const [a, b] = await registerClients(f.fleet, 2);
    expect((await zincati(f.baseUrl, "pre-reboot", a.id)).status).toBe(200);
    await evictDurableObject(coordinator(f.fleet));
    expect((await zincati(f.baseUrl, "pre-reboot", b.id)).json.kind).toBe("semaphore_full");
    expect(await holderIds(f.fleet)).toEqual([a.id]);
    await evictDurableObject(coordinator(f.fleet));
    expect((await zincati(f.baseUrl, "steady-state", a.id)).json).toEqual({ released: true });
    expect((await zincati(f.baseUrl, "pre-reboot", b.id)).status).toBe(200);
  });

  it("resizes live: shrinking keeps every holder and stops grants until they drop below; growing admits at once", async () => {
    const f = await fleetWithKey();
    await putGroup(f.fleet, "default", { slots: 3 });
    const [a, b, c, d, e] = await registerClients(f.fleet, 5);
    for (const x of [a, b, c]) expect((await zincati(f.baseUrl, "pre-reboot", x.id)).status).toBe(200);
    const shrunk = await putGroup(f.fleet, "default", { slots: 1 });
    expect(shrunk.holders).toHaveLength(3);
    expect(shrunk.available_slots).toBe(0);
    expect((await zincati(f.baseUrl, "pre-reboot", d.id)).json.kind).toBe("semaphore_full");
    await zincati(f.baseUrl, "steady-state", a.id);
    await zincati(f.baseUrl, "steady-state", b.id);
    expect((await zincati(f.baseUrl, "pre-reboot", d.id)).json.kind).toBe("semaphore_full");
    await zincati(f.baseUrl, "steady-state", c.id);
    expect((await zincati(f.baseUrl, "pre-reboot", d.id)).status).toBe(200);
    expect((await zincati(f.baseUrl, "pre-reboot", e.id)).json.kind).toBe("semaphore_full");
    await putGroup(f.fleet, "default", { slots: 2 });
    expect((await zincati(f.baseUrl, "pre-reboot", e.id)).status).toBe(200);
    expect(await holderIds(f.fleet)).toEqual([d.id, e.id]);
  });

  it("pauses a group: new grants are refused with group_paused, holders keep theirs and can release", async () => {
    const f = await fleetWithKey();
    await putGroup(f.fleet, "default", { slots: 2 });
    const [a, b] = await registerClients(f.fleet, 2);
    await zincati(f.baseUrl, "pre-reboot", a.id);
    const paused = await putGroup(f.fleet, "default", { slots: 2, paused: true });
    expect(paused).toMatchObject({ paused: true, open_now: false });
    const refused = await zincati(f.baseUrl, "pre-reboot", b.id);
    expect(refused).toMatchObject({ status: 409, json: { kind: "group_paused" } });
    expect((await zincati(f.baseUrl, "pre-reboot", a.id)).status).toBe(200);
    expect((await zincati(f.baseUrl, "steady-state", a.id)).json).toEqual({ released: true });
    // Omitting paused leaves it as it is; false lifts it.
    expect((await putGroup(f.fleet, "default", { slots: 3 })).paused).toBe(true);
    await putGroup(f.fleet, "default", { slots: 3, paused: false });
    expect((await zincati(f.baseUrl, "pre-reboot", b.id)).status).toBe(200);
  });

  it("grants only inside a maintenance window in the window's own time zone; release works outside", async () => {
    const f = await fleetWithKey();
    const [a, b] = await registerClients(f.fleet, 2);
    // Tokyo has no DST: local time is UTC+9 all year.
    const tokyo = (offsetMin: number) => {
      const t = new Date(Date.now() + 9 * 3600_000 + offsetMin * 60_000);
      const day = ["Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"][t.getUTCDay()];
      const hhmm = `${String(t.getUTCHours()).padStart(2, "0")}:${String(t.getUTCMinutes()).padStart(2, "0")}`;
      return { days: [day], start_time: hhmm, time_zone: "Asia/Tokyo" };
    };
    // Opened 5 minutes ago in Tokyo, so it is open now; the same wall-clock time in UTC is not.
    const openNow = { ...tokyo(-5), length_minutes: 30 };
    const closedNow = { ...tokyo(60), length_minutes: 30 };
    await putGroup(f.fleet, "default", { slots: 2, windows: [closedNow] });
    const refused = await zincati(f.baseUrl, "pre-reboot", a.id);
    expect(refused).toMatchObject({ status: 409, json: { kind: "outside_maintenance_window" } });
    expect(await holderIds(f.fleet)).toEqual([]);
    // The same wall-clock window read in UTC (9 hours away) is closed now.
    const sameClockInUtc = { ...openNow, time_zone: "UTC" };
    await putGroup(f.fleet, "default", { slots: 2, windows: [sameClockInUtc] });
    expect((await zincati(f.baseUrl, "pre-reboot", a.id)).json.kind).toBe("outside_maintenance_window");
    const g = await putGroup(f.fleet, "default", { slots: 2, windows: [openNow] });
    expect(g.open_now).toBe(true);
    expect((await zincati(f.baseUrl, "pre-reboot", a.id)).status).toBe(200);
    await putGroup(f.fleet, "default", { slots: 2, windows: [closedNow] });
    expect((await zincati(f.baseUrl, "pre-reboot", b.id)).json.kind).toBe("outside_maintenance_window");
    expect((await zincati(f.baseUrl, "steady-state", a.id)).json).toEqual({ released: true });
  });
});

describe("stuck holders and automatic release", () => {
  it("flags a holder stuck once it has held its slot longer than the fleet's lock TTL", async () => {
    const f = await fleetWithKey({ lock_ttl_s: 600 });
    await putGroup(f.fleet, "default", { slots: 2 });
    const [a, b] = await registerClients(f.fleet, 2);
    await zincati(f.baseUrl, "pre-reboot", a.id);
    await zincati(f.baseUrl, "pre-reboot", b.id);
    // Age a's grant past the TTL in the coordinator's own storage (the clock is not ours to move).
    await runInDurableObject(coordinator(f.fleet), async (_instance, state) => {
      const g = state.storage.kv.get<GroupState>("group:default")!;
      g.holders[0].granted_at = Date.now() - 601_000;
      state.storage.kv.put("group:default", g);
    });
    // The coordinator mirrors its groups in memory; waking it again reads what storage now says.
    await evictDurableObject(coordinator(f.fleet));
    const g = await getGroup(f.fleet, "default");
    expect(g.holders.map((h) => [h.id, h.stuck])).toEqual([
      [a.id, true],
      [b.id, false],
    ]);
    const list = await call("GET", `/v1/fleets/${f.fleet}/reboot-groups`);
    expect(list.json.lock_ttl_s).toBe(600);
    expect(list.json.items[0].holders[0]).toMatchObject({
      id: a.id,
      stuck: true,
      server: { id: a.serverId, hostname: a.hostname },
    });
  });

  it("releases a holder whose server reports a new boot_id (it rebooted, its steady-state was lost)", async () => {
    const f = await fleetWithKey();
    await putGroup(f.fleet, "default", { slots: 1 });
    const [a, b] = await registerClients(f.fleet, 2);
    expect(
      (await call("PUT", "/v1/agent/inventory", { token: a.token, body: report(1, [], { boot_id: "boot-1" }) })).status,
    ).toBe(200);
    await zincati(f.baseUrl, "pre-reboot", a.id);
    // The same boot reporting again changes nothing.
    await call("PUT", "/v1/agent/inventory", { token: a.token, body: report(1, [], { boot_id: "boot-1" }) });
    expect(await holderIds(f.fleet)).toEqual([a.id]);
    const rebooted = await call("PUT", "/v1/agent/inventory", {
      token: a.token,
      body: report(1, [], { boot_id: "boot-2" }),
    });
    expect(rebooted.status).toBe(200);
    expect(await holderIds(f.fleet)).toEqual([]);
    expect((await zincati(f.baseUrl, "pre-reboot", b.id)).status).toBe(200);
    const audit = await call("GET", `/v1/audit?target=server:${a.serverId}`);
    expect(audit.json.items.map((e: { action: string }) => e.action)).toContain("fleetlock.release_server");
  });

  it("does not release a slot granted after the new boot was seen", async () => {
    const f = await fleetWithKey();
    await putGroup(f.fleet, "default", { slots: 1 });
    const [a] = await registerClients(f.fleet, 1);
    await call("PUT", "/v1/agent/inventory", { token: a.token, body: report(1, [], { boot_id: "boot-1" }) });
    await call("PUT", "/v1/agent/inventory", { token: a.token, body: report(1, [], { boot_id: "boot-2" }) });
    await zincati(f.baseUrl, "pre-reboot", a.id);
    await call("PUT", "/v1/agent/inventory", { token: a.token, body: report(1, [], { boot_id: "boot-2" }) });
    expect(await holderIds(f.fleet)).toEqual([a.id]);
  });

  it("releases everything a server holds through releaseServer (the removal path)", async () => {
    const f = await fleetWithKey();
    await putGroup(f.fleet, "default", { slots: 2 });
    const [a, b] = await registerClients(f.fleet, 2);
    await zincati(f.baseUrl, "pre-reboot", a.id);
    await zincati(f.baseUrl, "pre-reboot", b.id);
    const released = await coordinator(f.fleet).releaseServer(a.serverId, { reason: "server removed", actor: "test" });
    expect(released.map((h) => [h.id, h.group])).toEqual([[a.id, "default"]]);
    expect(await holderIds(f.fleet)).toEqual([b.id]);
  });

  it("retries a boot_id release the coordinator missed from the ledger's alarm", async () => {
    const f = await fleetWithKey();
    await putGroup(f.fleet, "default", { slots: 1 });
    const [a] = await registerClients(f.fleet, 1);
    await call("PUT", "/v1/agent/inventory", { token: a.token, body: report(1, [], { boot_id: "boot-1" }) });
    await zincati(f.baseUrl, "pre-reboot", a.id);
    const ledger = env.LEDGER.get(env.LEDGER.idFromName(a.serverId));
    const restore = await breakCoordinator(ledger);
    // The host came back with a new boot and its steady-state was lost; the coordinator is unreachable.
    const res = await call("PUT", "/v1/agent/inventory", {
      token: a.token,
      body: report(1, [], { boot_id: "boot-2" }),
    });
    expect(res.status).toBe(200);
    expect(await holderIds(f.fleet)).toEqual([a.id]);
    await evictDurableObject(ledger);
    await restore(); // a fresh instance has the real binding again

    expect(await fireTimersNow(ledger)).toBe(true);
    expect(await holderIds(f.fleet)).toEqual([]);
    expect(await pendingEffects(ledger)).toBe(0);
  });

  it("moves a release left pending by the previous release into the outbox when the ledger loads", async () => {
    const f = await fleetWithKey();
    await putGroup(f.fleet, "default", { slots: 1 });
    const [a] = await registerClients(f.fleet, 1);
    await zincati(f.baseUrl, "pre-reboot", a.id);
    const ledger = env.LEDGER.get(env.LEDGER.idFromName(a.serverId));
    await runInDurableObject(ledger, async (_i, state) => {
      state.storage.kv.put("fleetlock_release_pending", {
        fleet_id: f.fleet,
        from_boot_id: "boot-1",
        to_boot_id: "boot-2",
        seen_at: Date.now(),
        attempts: 1,
      });
    });
    await evictDurableObject(ledger);
    expect(await ledger.view()).not.toBeNull();
    expect(await fireTimersNow(ledger)).toBe(true);
    expect(await holderIds(f.fleet)).toEqual([]);
    await runInDurableObject(ledger, async (_i, state) => {
      expect(state.storage.kv.get("fleetlock_release_pending")).toBeUndefined();
    });
  });
});
