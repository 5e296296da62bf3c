/**
 * When a ledger's health event reaches its fleet's coordinator (src/fleetlock/ledger-side.ts): a
 * reboot, a change of health class and a realized report the coordinator may be waiting for
 * always; a realized report it heard already for that boot and generation never; a drift-only
 * event only while a webhook asks for `server.drifted`, as the coordinator publishes in D1
 * (src/fleetlock/health-watch.ts) before it answers the webhook's creation.
 */
import { env, runInDurableObject } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import {
  DriftWatch,
  fixHoldAnnounced,
  healthUse,
  sendHealth,
  type HealthSent,
  type ServerHealthEvent,
} from "../src/fleetlock/ledger-side";
import { breakD1, call, createFleet, fireTimersNow, registerServer, report, settle } from "./helpers";
import { createWebhook, hook, receivedBy, receiver } from "./webhook-helpers";
import { coordinator, ledger } from "./support/objects";

/** The coordinator's serverHealth calls, per fleet (RPC dispatches on the class, so it is wrapped there). */
const healthCalls = new Map<string, ServerHealthEvent[]>();
let wrapped = false;
async function countHealthCalls(fleet: string) {
  healthCalls.set(fleet, []);
  await runInDurableObject(coordinator(fleet), (instance) => {
    if (wrapped) return;
    wrapped = true;
    const proto = Object.getPrototypeOf(instance) as { serverHealth(e: ServerHealthEvent): Promise<void> };
    const original = proto.serverHealth;
    proto.serverHealth = async function (this: unknown, e: ServerHealthEvent) {
      healthCalls.get(e.fleet_id)?.push(e);
      await original.call(this, e);
    };
  });
  return healthCalls.get(fleet)!;
}

const watchOf = async (fleet: string) =>
  (await env.DB.prepare("SELECT health_watch AS w FROM fleets WHERE id = ?").bind(fleet).first<{ w: number }>())!.w;

const realized = (boot = "boot-1") => report(1, [], { boot_id: boot });
/** A removed agent still running: drifted, in the same health class as realized. */
const drifted = (boot = "boot-1") => report(1, [{ name: "old", image: "old:1" }], { boot_id: boot });

async function put(serverId: string, token: string, body: unknown) {
  expect((await call("PUT", "/v1/agent/inventory", { token, body })).status).toBe(200);
  await settle(serverId);
}

describe("health events to the fleet's coordinator", () => {
  it("a host flapping between realized and drifted calls its coordinator once per boot, and a webhook created later still gets the next drift", async () => {
    const f = await createFleet();
    const s = await registerServer(f.id);
    const calls = await countHealthCalls(f.id);
    // A new fleet has no webhook: its ledgers keep drifts home from the start.
    expect(await watchOf(f.id)).toBe(0);
    // A fleet from before the column (its default, unknown): the first drift goes out, and the
    // coordinator says no webhook wants it.
    await env.DB.prepare("UPDATE fleets SET health_watch = 1 WHERE id = ?").bind(f.id).run();

    await put(s.id, s.token, realized());
    await put(s.id, s.token, drifted());
    expect(calls.map((e) => e.status?.to)).toEqual(["realized", "drifted"]);
    expect(await watchOf(f.id)).toBe(0);

    for (let i = 0; i < 3; i++) {
      await put(s.id, s.token, realized());
      await put(s.id, s.token, drifted());
    }
    expect(calls).toHaveLength(2);
    await runInDurableObject(ledger(s.id), async (_i, state) => {
      expect(state.storage.sql.exec("SELECT COUNT(*) AS n FROM _outbox WHERE kind = 'server_health'").one().n).toBe(0);
    });

    // Subscribed: the watch is in D1 when the creation is answered, so the next drift is sent.
    const sent = await receiver(f.id);
    const wants = await hook(f.id, "drift", ["server.drifted"]);
    expect(await watchOf(f.id)).toBe(1);
    await put(s.id, s.token, realized());
    await put(s.id, s.token, drifted());
    await fireTimersNow(coordinator(f.id));
    expect(receivedBy(sent, wants)).toEqual(["server.drifted"]);
    expect(calls).toHaveLength(3);

    // A reboot is always news (slots, the rebooted-and-not-healthy gate), realized or not.
    await put(s.id, s.token, realized("boot-2"));
    expect(calls.at(-1)).toMatchObject({ rebooted_from: "boot-1", realized: true });

    // The last webhook asking for it gone: the watch is off again, and drifts stay home.
    const id = (await call("GET", `/v1/fleets/${f.id}/webhooks`)).json as { items?: { id: string }[] };
    const list = Array.isArray(id) ? (id as { id: string }[]) : (id.items ?? []);
    for (const w of list) expect((await call("DELETE", `/v1/fleets/${f.id}/webhooks/${w.id}`)).status).toBe(200);
    expect(await watchOf(f.id)).toBe(0);
    const before = calls.length;
    await put(s.id, s.token, drifted("boot-2"));
    await put(s.id, s.token, realized("boot-2"));
    expect(calls).toHaveLength(before);
  });

  it("refuses to create a webhook asking for drifts while D1 refuses the fleet's watch, creating nothing", async () => {
    const f = await createFleet();
    const s = await registerServer(f.id);
    await put(s.id, s.token, realized());
    expect(await watchOf(f.id)).toBe(0);
    const restore = await breakD1(coordinator(f.id));
    const refused = await createWebhook(f.id, { url: "https://hooks.example.com/drift", events: ["server.drifted"] });
    // A webhook wanting no drift needs no watch: created as before (its audit row waits in the outbox).
    const other = await createWebhook(f.id, { url: "https://hooks.example.com/failed", events: ["server.failed"] });
    await restore();
    expect(refused.status).toBe(503);
    expect(refused.json.error).toMatchObject({ code: "unavailable", message: expect.stringContaining("not created") });
    expect(other.status).toBe(201);
    const listed = (await call("GET", `/v1/fleets/${f.id}/webhooks`)).json;
    const urls = (Array.isArray(listed) ? listed : listed.items).map((w: { url: string }) => w.url);
    expect(urls).toEqual(["https://hooks.example.com/failed"]);
    expect(await watchOf(f.id)).toBe(0);

    // D1 back: created, and the watch is in D1 when it is answered, so the next drift is sent.
    const calls = await countHealthCalls(f.id);
    const sent = await receiver(f.id);
    const wants = await hook(f.id, "drift", ["server.drifted"]);
    expect(await watchOf(f.id)).toBe(1);
    await put(s.id, s.token, drifted());
    await fireTimersNow(coordinator(f.id));
    expect(calls.map((e) => e.status?.to)).toEqual(["drifted"]);
    expect(receivedBy(sent, wants)).toEqual(["server.drifted"]);
  });

  it("a failed server always reaches the coordinator, whatever the watch", async () => {
    const f = await createFleet();
    const s = await registerServer(f.id);
    const calls = await countHealthCalls(f.id);
    await put(s.id, s.token, realized());
    await put(s.id, s.token, drifted());
    expect(calls).toHaveLength(1);
    await put(s.id, s.token, report(1, [], { errors: [{ agent: "x", op: "update", message: "disk full" }] }));
    expect(calls.at(-1)?.status).toEqual({ from: "drifted", to: "failed" });
    await put(s.id, s.token, realized());
    expect(calls.at(-1)?.status).toEqual({ from: "failed", to: "realized" });
  });
});

describe("the ledger's memory of what it sent", () => {
  it("stays as storage is when the turn that sent an event throws and rolls back", async () => {
    const f = await createFleet();
    const s = await registerServer(f.id);
    await put(s.id, s.token, realized());
    await runInDurableObject(ledger(s.id), (instance) => {
      const p = (instance as any).parts;
      // A fix's hold waits on a realized report past generation 1.
      fixHoldAnnounced(p.store, 1);
      const before = p.store.healthSent();
      expect(before).toMatchObject({ fix_from: 1 });
      const base: ServerHealthEvent = {
        fleet_id: f.id,
        server_id: s.id,
        hostname: "h",
        at: Date.now(),
        boot_id: before.boot_id ?? "boot-1",
        rebooted_from: null,
        realized: true,
        generation: 2,
        status: { from: "drifted", to: "realized" },
      };
      // The realized report past the hold's generation, in a turn whose later statement throws.
      expect(() =>
        p.store.transaction(() => {
          expect(sendHealth(p, base, 2)).toBe(true);
          throw new Error("simulated: a later statement of the turn failed");
        }),
      ).toThrow("simulated");
      // Rolled back: the event was never stored, so the hold still waits and the next report must go.
      expect(p.store.healthSent()).toEqual(before);
      // A drift-only event rolled back leaves nothing waiting on a read of the fleet's watch.
      const drift = { ...base, at: base.at + 1, realized: false, status: { from: "realized", to: "drifted" } };
      expect(() =>
        p.store.transaction(() => {
          expect(sendHealth(p, drift, 2)).toBe(true);
          throw new Error("simulated: a later statement of the turn failed");
        }),
      ).toThrow("simulated");
      expect(p.driftWatch.wanted()).toBe(false);
      // Committed, both are remembered.
      p.store.transaction(() => sendHealth(p, base, 2));
      expect(p.store.healthSent()).toEqual({ boot_id: base.boot_id });
      p.store.transaction(() => sendHealth(p, drift, 2));
      expect(p.driftWatch.wanted()).toBe(true);
    });
  });
});

describe("who a health event is for", () => {
  const event = (over: Partial<ServerHealthEvent> = {}): ServerHealthEvent => ({
    fleet_id: "f",
    server_id: "s",
    hostname: "h",
    at: 1,
    boot_id: "b1",
    rebooted_from: null,
    realized: true,
    status: { from: "drifted", to: "realized" },
    ...over,
  });
  const heard: HealthSent = { boot_id: "b1" };

  it("sends a realized report only for a boot the coordinator has not heard realized, or while a fix's hold waits", () => {
    expect(healthUse(event(), null)).toBe("coordinator");
    expect(healthUse(event(), heard)).toBe(null);
    expect(healthUse(event({ boot_id: "b2" }), heard)).toBe("coordinator");
    expect(healthUse(event(), { ...heard, fix_from: 4 })).toBe("coordinator");
    expect(healthUse(event({ rebooted_from: "b0" }), heard)).toBe("coordinator");
  });

  it("leaves a drift to the webhooks, and a change of health class to the coordinator", () => {
    const drift = event({ realized: false, status: { from: "realized", to: "drifted" } });
    expect(healthUse(drift, heard)).toBe("webhooks");
    expect(healthUse({ ...drift, status: { from: "failed", to: "drifted" } }, heard)).toBe("coordinator");
    expect(healthUse({ ...drift, status: { from: "realized", to: "failed" } }, heard)).toBe("coordinator");
    expect(healthUse({ ...drift, rebooted_from: "b0" }, heard)).toBe("coordinator");
  });

  it("records what it sent, so the same boot's realized report is not sent twice, and a fix's hold until a report past its generation went", () => {
    const enqueued: ServerHealthEvent[] = [];
    let sent: HealthSent | null = null;
    const sink = {
      outbox: { enqueue: (_k: "server_health", e: ServerHealthEvent) => void enqueued.push(e) },
      store: {
        healthSent: () => sent,
        setHealthSent: (s: HealthSent) => void (sent = s),
        onCommit: (fn: () => void) => fn(),
      },
      driftWatch: new DriftWatch(),
    };
    expect(sendHealth(sink, event(), 4)).toBe(true);
    expect(sent).toEqual({ boot_id: "b1" });
    // A new generation realized (a fleet-wide desired change) is nothing the coordinator uses.
    expect(sendHealth(sink, event(), 5)).toBe(false);
    expect(sendHealth(sink, null, 5)).toBe(false);
    expect(enqueued).toHaveLength(1);
    // A fix's write under a hold, from generation 5: realized reports go out until one past 5 has.
    fixHoldAnnounced(sink.store, 5);
    expect(sent).toEqual({ boot_id: "b1", fix_from: 5 });
    expect(sendHealth(sink, event(), 5)).toBe(true);
    expect(sent).toEqual({ boot_id: "b1", fix_from: 5 });
    expect(sendHealth(sink, event(), 6)).toBe(true);
    expect(sent).toEqual({ boot_id: "b1" });
    expect(sendHealth(sink, event(), 6)).toBe(false);
    expect(enqueued).toHaveLength(3);
    // Two holds' announcements: the older generation stands.
    fixHoldAnnounced(sink.store, 7);
    fixHoldAnnounced(sink.store, 9);
    expect(sent).toEqual({ boot_id: "b1", fix_from: 7 });
  });

  it("skips a drift only on a read made after the report was accepted", () => {
    const w = new DriftWatch();
    const early = w.reading();
    w.accepted(10);
    early(false);
    // The read was built before the report: it cannot know of a webhook created in between.
    expect(w.unwatched(10)).toBe(false);
    const late = w.reading();
    late(false);
    expect(w.unwatched(10)).toBe(true);
    w.settled(10);
    expect(w.unwatched(10)).toBe(false);
    // Watched: sent.
    w.accepted(11);
    w.reading()(true);
    expect(w.unwatched(11)).toBe(false);
    // A fresh object (evicted) knows nothing, and sends.
    expect(new DriftWatch().unwatched(11)).toBe(false);
  });
});
