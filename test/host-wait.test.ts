import { evictDurableObject, runInDurableObject, SELF } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import { viewWaitRequest } from "../src/ledger/waits";
import { meterReading } from "../src/local/meter";
import { LOOK_AGAIN_AT } from "../src/objects/kit/wake";
import { BASE, call, createFleet, registerServer, report } from "./helpers";
import { ledger, sleep, until } from "./support/objects";

const waiters = (id: string) => runInDurableObject(ledger(id), (_i, state) => state.getWebSockets("waiter").length);

/** The cost meter's reading of one server's ledger (this file runs the local entry: vitest.config.ts). */
const ledgerMeter = (id: string) =>
  (meterReading().objects.ServerLedger as { by_instance: Record<string, any> }).by_instance[ledger(id).id.toString()];

describe("long polls wait in the Worker while the ledger sleeps", () => {
  it("a waiting poll leaves its ledger with no call in flight, no background work, and asleep", async () => {
    const fleet = await createFleet();
    const s = await registerServer(fleet.id);
    const parked = call("GET", "/v1/agent/desired?wait=30", { token: s.token, headers: { "If-None-Match": '"1"' } });
    await until(async () => (await waiters(s.id)) === 1);
    await sleep(100);
    const during = ledgerMeter(s.id);
    expect(during).toMatchObject({ in_flight: 0, waiting_until: 0 });
    await sleep(1_000);
    const later = ledgerMeter(s.id);
    expect(later.awake_ms - during.awake_ms).toBeLessThan(100);
    expect(later.in_flight + later.waiting_until).toBe(0);
    await call("PUT", `/v1/servers/${s.id}/desired`, { body: { generation: 2, agents: [] } });
    expect((await parked).status).toBe(200);
  });

  it("a waiting poll holds only a hibernatable waiter in the ledger: evicted mid-wait, the ledger still wakes it with the change", async () => {
    const fleet = await createFleet();
    const s = await registerServer(fleet.id);
    const started = Date.now();
    const parked = call("GET", "/v1/agent/desired?wait=30", { token: s.token, headers: { "If-None-Match": '"1"' } });
    await until(async () => (await waiters(s.id)) === 1);
    // Eviction tears the instance down (it would wait for a call in flight); the waiter hibernates.
    await evictDurableObject(ledger(s.id));
    await call("PUT", `/v1/servers/${s.id}/desired`, { body: { generation: 2, agents: [] } });
    const res = await parked;
    expect(res.status).toBe(200);
    expect(res.json.generation).toBe(2);
    expect(Date.now() - started).toBeLessThan(10_000);
    expect(await waiters(s.id)).toBe(0);
  });

  it("a token revoked during the wait gets 401 when the wait ends, from the wake itself", async () => {
    const fleet = await createFleet();
    const s = await registerServer(fleet.id);
    const parked = call("GET", "/v1/agent/desired?wait=30", { token: s.token, headers: { "If-None-Match": '"1"' } });
    await until(async () => (await waiters(s.id)) === 1);
    const calls = ledgerMeter(s.id).rpc;
    expect((await call("DELETE", `/v1/tokens/${s.id}`)).status).toBe(200);
    const res = await parked;
    expect(res.status).toBe(401);
    expect(res.json.error.code).toBe("unauthorized");
    // The revocation was the only call: the wake's answer checked the token, not a second poll.
    expect(ledgerMeter(s.id).rpc - calls).toBe(1);
  });

  it("a woken poll gets its new config in the wake, with no second call to the ledger", async () => {
    const fleet = await createFleet();
    const s = await registerServer(fleet.id);
    const parked = call("GET", "/v1/agent/desired?wait=30", { token: s.token, headers: { "If-None-Match": '"1"' } });
    await until(async () => (await waiters(s.id)) === 1);
    const calls = ledgerMeter(s.id).rpc;
    const agents = [{ name: "a", image: "registry.example/a:2", version: "2" }];
    expect((await call("PUT", `/v1/servers/${s.id}/desired`, { body: { generation: 2, agents } })).status).toBe(200);
    const res = await parked;
    expect(res.status).toBe(200);
    expect(res.json.generation).toBe(2);
    expect(res.json.agents.map((a: { image: string }) => a.image)).toEqual(["registry.example/a:2"]);
    expect(res.headers.get("etag")).toBe('"2"');
    // The operator's write is the one call: the poll's answer came with its wake.
    expect(ledgerMeter(s.id).rpc - calls).toBe(1);
  });

  it("a host whose generation is behind is answered at once, without a waiter", async () => {
    const fleet = await createFleet();
    const s = await registerServer(fleet.id);
    await call("PUT", `/v1/servers/${s.id}/desired`, { body: { generation: 2, agents: [] } });
    const started = Date.now();
    const res = await call("GET", "/v1/agent/desired?wait=30", { token: s.token, headers: { "If-None-Match": '"1"' } });
    expect(res.status).toBe(200);
    expect(Date.now() - started).toBeLessThan(3_000);
    expect(await waiters(s.id)).toBe(0);
  });

  it("a client that hangs up ends its wait: the waiter is let go", async () => {
    const fleet = await createFleet();
    const s = await registerServer(fleet.id);
    const controller = new AbortController();
    const parked = SELF.fetch(`${BASE}/v1/agent/desired?wait=30`, {
      headers: { Authorization: `Bearer ${s.token}`, "If-None-Match": '"1"' },
      signal: controller.signal,
    }).catch(() => null);
    await until(async () => (await waiters(s.id)) === 1);
    controller.abort();
    await parked;
    await until(async () => (await waiters(s.id)) === 0);
  });

  it("an operator's view wait survives an eviction too, and asks to be looked at again when the status would turn stale", async () => {
    const fleet = await createFleet();
    const s = await registerServer(fleet.id);
    await call("PUT", `/v1/servers/${s.id}/desired`, {
      body: { generation: 2, agents: [{ name: "a", image: "a:1", version: "1" }] },
    });
    await call("PUT", "/v1/agent/inventory", { token: s.token, body: report(2, [{ name: "a", image: "a:1" }]) });
    const tag = (await call("GET", `/v1/servers/${s.id}`)).headers.get("ETag")!;
    const upgrade = await ledger(s.id).fetch(viewWaitRequest(tag));
    expect(upgrade.status).toBe(101);
    const view = (await call("GET", `/v1/servers/${s.id}`)).json;
    expect(Number(upgrade.headers.get(LOOK_AGAIN_AT))).toBe(Date.parse(view.last_seen) + 300_000 + 1);
    upgrade.webSocket!.accept();
    upgrade.webSocket!.close();

    const parked = call("GET", `/v1/servers/${s.id}?wait=30`, { headers: { "If-None-Match": tag } });
    await until(async () => (await waiters(s.id)) === 1);
    await evictDurableObject(ledger(s.id));
    await call("PUT", "/v1/agent/inventory", {
      token: s.token,
      body: report(2, [{ name: "a", image: "a:1", state: "stopped" }]),
    });
    const res = await parked;
    expect(res.status).toBe(200);
    expect(res.headers.get("ETag")).not.toBe(tag);
  });
});
