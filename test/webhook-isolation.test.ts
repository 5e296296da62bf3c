/**
 * Webhook receivers are outsiders: one that never answers, or is down, holds up nothing but its
 * own deliveries — not an operator's write, not the fleet's other webhooks, not a fleet's deletion.
 */
import { env, runInDurableObject } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import type { Fetcher } from "../src/webhooks/dispatch";
import { call, createFleet, fireTimersNow, registerServer, uniq } from "./helpers";
import { createWebhook, sendsSettled } from "./webhook-helpers";
import { coordinator, sleep } from "./support/objects";

type Seen = { url: string; event: string | null; at: number };

/** Receivers by URL: `hang` accepts and never answers (until the sender's time-out), `down` answers 503. */
async function receivers(fleet: string, behaviour: Record<string, "hang" | "down" | "ok">) {
  const seen: Seen[] = [];
  const fetcher: Fetcher = (url, init) => {
    seen.push({ url, event: new Headers(init.headers).get("x-harbormaster-event"), at: Date.now() });
    const how = behaviour[url] ?? "ok";
    if (how === "down") return Promise.resolve(new Response("down", { status: 503 }));
    if (how === "ok") return Promise.resolve(new Response("ok"));
    return new Promise<Response>((_, reject) =>
      init.signal?.addEventListener("abort", () => reject(init.signal!.reason)),
    );
  };
  await runInDurableObject(coordinator(fleet), (instance) => {
    (instance as unknown as { parts: { webhooks: { fetcher: Fetcher } } }).parts.webhooks.fetcher = fetcher;
  });
  return seen;
}

async function timedPut(fleet: string, slots: number) {
  const t0 = performance.now();
  const res = await call("PUT", `/v1/fleets/${fleet}/reboot-groups/default`, { body: { slots } });
  const ms = performance.now() - t0;
  expect(res.status).toBe(200);
  return ms;
}

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];

describe("webhook receivers that hang or are down", () => {
  it("a receiver that never answers delays neither an operator's reboot-group PUT nor the fleet's other webhook", async () => {
    const plain = await createFleet();
    const hooked = await createFleet();
    const hang = "https://hooks.example.com/hangs";
    const fine = "https://hooks.example.com/fine";
    for (const url of [hang, fine])
      expect(
        (await createWebhook(hooked.id, { url, events: ["server.registered", "reboot.gate_closed"] })).status,
      ).toBe(201);
    const seen = await receivers(hooked.id, { [hang]: "hang", [fine]: "ok" });

    // Events the hanging receiver takes and never answers, sent while the operator works.
    const registeredAt: number[] = [];
    for (let i = 0; i < 3; i++) {
      await registerServer(hooked.id);
      registeredAt.push(Date.now());
    }
    for (let i = 0; i < 40 && seen.filter((s) => s.url === fine).length < 3; i++) await sleep(50);
    const fineAt = seen.filter((s) => s.url === fine).map((s) => s.at);
    expect(fineAt).toHaveLength(3);
    for (let i = 0; i < 3; i++) expect(fineAt[i] - registeredAt[i]).toBeLessThan(2000);
    console.log(
      `the other webhook received server.registered after ${fineAt.map((t, i) => t - registeredAt[i]).join(", ")} ms`,
    );
    expect(seen.filter((s) => s.url === hang).length).toBeGreaterThan(0);

    // The same PUT, alternating between a fleet without webhooks and the one whose receiver hangs,
    // each right after a registration, so the hanging receiver is owed a fresh event every time.
    await timedPut(plain.id, 1);
    await timedPut(hooked.id, 1);
    const without: number[] = [];
    const withHanging: number[] = [];
    for (let i = 0; i < 9; i++) {
      // The registration's own work (its event taken, the sends started) is done before the PUT.
      await registerServer(plain.id);
      await sleep(200);
      without.push(await timedPut(plain.id, 2 + (i % 2)));
      await registerServer(hooked.id);
      await sleep(200);
      withHanging.push(await timedPut(hooked.id, 2 + (i % 2)));
    }
    const a = median(without);
    const b = median(withHanging);
    console.log(
      `reboot-group PUT, median of 9: ${a.toFixed(1)} ms without webhooks, ${b.toFixed(1)} ms with a hanging receiver`,
    );
    // ±10 %, or 20 ms: a PUT takes only tens of milliseconds here, on a machine shared with other
    // work, where 10 % is within the noise; a PUT that waits on the receiver takes its 10 s time-out.
    expect(b).toBeLessThanOrEqual(Math.max(a * 1.1, a + 20));
  }, 120_000);

  it("an operator's test of a receiver that never answers is answered at once; its outcome comes later", async () => {
    const f = await createFleet();
    const hang = "https://hooks.example.com/hangs-test";
    const created = await createWebhook(f.id, { url: hang, events: ["server.registered"] });
    const seen = await receivers(f.id, { [hang]: "hang" });
    const t0 = performance.now();
    const test = await call("POST", `/v1/fleets/${f.id}/webhooks/${created.json.webhook.id}/test`);
    const ms = performance.now() - t0;
    console.log(`webhook test of a receiver that never answers: answered in ${ms.toFixed(0)} ms`);
    expect(test.status).toBe(202);
    expect(ms).toBeLessThan(2_000);
    expect(test.json).toMatchObject({ status: "pending", attempts: 0 });
    // The send went out meanwhile, and its time-out is recorded as the attempt's outcome.
    await sendsSettled(f.id);
    expect(seen.map((s) => s.event)).toEqual(["webhook.test"]);
    expect((await call("GET", test.headers.get("location")!)).json).toMatchObject({
      status: "pending",
      attempts: 1,
      last_error: "no answer within 10 s",
    });
  }, 30_000);

  it("at most a few sends per webhook are under way at once, whatever a hanging receiver is owed", async () => {
    const f = await createFleet();
    const hang = "https://hooks.example.com/hangs-many";
    expect((await createWebhook(f.id, { url: hang, events: ["server.registered"] })).status).toBe(201);
    const seen = await receivers(f.id, { [hang]: "hang" });
    for (let i = 0; i < 8; i++) await registerServer(f.id);
    await sleep(500);
    expect(seen.length).toBe(4);
  }, 30_000);

  it("a fleet deleted while its receiver is down is created again within 5 s; its deliveries are dropped, not sent", async () => {
    const id = uniq("gone");
    expect((await call("POST", "/v1/fleets", { body: { id } })).status).toBe(201);
    const down = "https://hooks.example.com/down";
    const created = await createWebhook(id, { url: down, events: ["reboot.gate_closed"] });
    const seen = await receivers(id, { [down]: "down" });
    const test = await call("POST", `/v1/fleets/${id}/webhooks/${created.json.webhook.id}/test`);
    await sendsSettled(id);
    expect((await call("GET", test.headers.get("location")!)).json).toMatchObject({
      status: "pending",
      last_status: 503,
    });
    expect(seen).toHaveLength(1);

    const t0 = Date.now();
    expect((await call("DELETE", `/v1/fleets/${id}`)).status).toBe(204);
    let again = await call("POST", "/v1/fleets", { body: { id } });
    while (again.status === 409 && Date.now() - t0 < 5000) {
      await sleep(100);
      again = await call("POST", "/v1/fleets", { body: { id } });
    }
    const ms = Date.now() - t0;
    console.log(`fleet deleted with its receiver down: its id free again after ${ms} ms`);
    expect(again.status).toBe(201);
    expect(ms).toBeLessThan(5000);
    expect(await env.DB.prepare("SELECT COUNT(*) AS n FROM fleet_tasks WHERE fleet_id = ?").bind(id).first("n")).toBe(
      0,
    );

    // The deleted fleet's delivery is never sent again, and the new fleet starts empty and works.
    await fireTimersNow(coordinator(id));
    expect(seen).toHaveLength(1);
    expect((await call("GET", `/v1/fleets/${id}/webhooks`)).json.items).toEqual([]);
    const fresh = await createWebhook(id, { url: "https://hooks.example.com/new", events: ["reboot.gate_closed"] });
    expect(fresh.status).toBe(201);
    await receivers(id, {});
    const retest = await call("POST", `/v1/fleets/${id}/webhooks/${fresh.json.webhook.id}/test`);
    await sendsSettled(id);
    expect((await call("GET", retest.headers.get("location")!)).json).toMatchObject({ status: "delivered" });
    expect((await call("PUT", `/v1/fleets/${id}/reboot-groups/default`, { body: { slots: 1 } })).status).toBe(200);
  }, 30_000);

  it("records the deliveries a deleted fleet still owed as dropped, until the wipe takes the log", async () => {
    const f = await createFleet();
    const down = "https://hooks.example.com/down-log";
    const created = await createWebhook(f.id, { url: down, events: ["reboot.gate_closed"] });
    await receivers(f.id, { [down]: "down" });
    await call("POST", `/v1/fleets/${f.id}/webhooks/${created.json.webhook.id}/test`);
    const log = await runInDurableObject(coordinator(f.id), (instance) => {
      const c = (
        instance as unknown as {
          parts: {
            webhooks: { drop(why: string): number };
            webhookStore: { deliveries(id: string, n: number): { status: string; last_error: string }[] };
          };
        }
      ).parts;
      const dropped = c.webhooks.drop("dropped: the fleet was deleted");
      return { dropped, rows: c.webhookStore.deliveries(created.json.webhook.id, 10) };
    });
    expect(log.dropped).toBe(1);
    expect(log.rows).toMatchObject([{ status: "failed", last_error: "dropped: the fleet was deleted" }]);
  });

  it("sends a delivery that earlier code left in the coordinator's outbox, through the webhook's own queue", async () => {
    const f = await createFleet();
    const url = "https://hooks.example.com/left-over";
    const created = await createWebhook(f.id, { url, events: ["reboot.gate_closed"] });
    const seen = await receivers(f.id, {});
    await runInDurableObject(coordinator(f.id), async (instance) => {
      const c = (
        instance as unknown as {
          parts: {
            webhookStore: { addDelivery(r: unknown): void };
            outbox: { enqueue(kind: string, p: unknown): void; flush(): Promise<void> };
          };
        }
      ).parts;
      const event = {
        id: "left-over",
        type: "reboot.gate_closed",
        fleet: f.id,
        subject: "group:default",
        summary: "held",
        data: {},
        time: new Date().toISOString(),
      };
      c.webhookStore.addDelivery({
        id: "d-left-over",
        webhook_id: created.json.webhook.id,
        event_id: event.id,
        event_type: event.type,
        created_at: Date.now(),
      });
      c.outbox.enqueue("webhook", { delivery_id: "d-left-over", webhook_id: created.json.webhook.id, event });
      await c.outbox.flush();
    });
    await fireTimersNow(coordinator(f.id));
    expect(seen.map((s) => s.url)).toEqual([url]);
    const log = await call("GET", `/v1/fleets/${f.id}/webhooks/${created.json.webhook.id}/deliveries`);
    expect(log.json.items).toMatchObject([{ id: "d-left-over", status: "delivered", attempts: 1 }]);
  });
});
