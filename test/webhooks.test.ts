/**
 * Webhooks (docs/notifications.md): kept and sent by the fleet's coordinator, each delivery signed, retried
 * with backoff until the receiver takes it, recorded, and sent only for the events asked for.
 */
import { runInDurableObject } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import { verify } from "../src/webhooks/signing";
import { BASE, call, fireTimersNow, send } from "./helpers";
import { fleetWithKey, putGroup, raw, registerClients, zincati } from "./fleetlock-helpers";
import { createWebhook, receiver, sendsSettled } from "./webhook-helpers";
import { coordinator } from "./support/objects";

const create = createWebhook;

describe("webhooks", () => {
  it("answers the secret once at creation, never in a read, and lists the webhook", async () => {
    const f = await fleetWithKey();
    const res = await create(f.fleet, {
      url: "https://hooks.example.com/a",
      events: ["reboot.granted", "reboot.released"],
    });
    expect(res.status).toBe(201);
    expect(res.json.secret).toMatch(/^[A-Za-z0-9_-]{43}$/);
    expect(res.json.webhook).toMatchObject({
      url: "https://hooks.example.com/a",
      events: ["reboot.granted", "reboot.released"],
      format: "cloudevents",
    });
    const list = await call("GET", `/v1/fleets/${f.fleet}/webhooks`);
    expect(list.json.items).toHaveLength(1);
    expect(JSON.stringify(list.json)).not.toContain(res.json.secret);
    const one = await call("GET", `/v1/fleets/${f.fleet}/webhooks/${res.json.webhook.id}`);
    expect(JSON.stringify(one.json)).not.toContain(res.json.secret);
    expect((await call("DELETE", `/v1/fleets/${f.fleet}/webhooks/${res.json.webhook.id}`)).status).toBe(200);
    expect((await call("GET", `/v1/fleets/${f.fleet}/webhooks`)).json.items).toEqual([]);
  });

  it("refuses a webhook body over its limit whose Content-Length claims it is short, and creates nothing", async () => {
    const f = await fleetWithKey();
    // Over the webhook route's 16 KiB, well under the /v1 rule's 1 MiB: only the route's own limit stops it.
    const body = JSON.stringify({
      url: "https://hooks.example.com/a",
      events: ["reboot.granted"],
      description: "x".repeat(20_000),
    });
    const res = await send(`${BASE}/v1/fleets/${f.fleet}/webhooks`, {
      method: "POST",
      headers: {
        Authorization: "Bearer test-admin-token",
        "Content-Type": "application/json",
        "Content-Length": "100",
      },
      body,
    });
    expect(res.status).toBe(413);
    expect(res.json.error.code).toBe("payload_too_large");
    expect((await call("GET", `/v1/fleets/${f.fleet}/webhooks`)).json.items).toEqual([]);
  });

  it("refuses bad input with a clear error and stores nothing: not HTTPS, an unknown event, an oversized body", async () => {
    const f = await fleetWithKey();
    const http = await create(f.fleet, { url: "http://hooks.example.com/a", events: ["reboot.granted"] });
    expect(http.status).toBe(400);
    expect(http.json.error).toMatchObject({
      code: "validation_failed",
      message: expect.stringMatching(/url must be https/),
    });
    const creds = await create(f.fleet, { url: "https://user:pw@hooks.example.com/a", events: ["reboot.granted"] });
    expect(creds.status).toBe(400);
    const unknown = await create(f.fleet, {
      url: "https://hooks.example.com/a",
      events: ["reboot.granted", "reboot.exploded"],
    });
    expect(unknown.status).toBe(400);
    expect(JSON.stringify(unknown.json.error.details)).toMatch(/'reboot.exploded' is not an event/);
    const none = await create(f.fleet, { url: "https://hooks.example.com/a", events: [] });
    expect(none.status).toBe(400);
    const big = await raw(`/v1/fleets/${f.fleet}/webhooks`, {
      method: "POST",
      headers: { Authorization: "Bearer test-admin-token", "Content-Type": "application/json" },
      body: JSON.stringify({
        url: "https://hooks.example.com/a",
        events: ["reboot.granted"],
        description: "x".repeat(20_000),
      }),
    });
    expect(big.status).toBe(413);
    expect(big.json.error.code).toBe("payload_too_large");
    const long = await create(f.fleet, {
      url: `https://hooks.example.com/${"a".repeat(2100)}`,
      events: ["reboot.granted"],
    });
    expect(long.status).toBe(400);
    expect((await call("GET", `/v1/fleets/${f.fleet}/webhooks`)).json.items).toEqual([]);
  });

  it("delivers exactly once with a valid signature after the receiver failed twice, and not at all for an event it did not ask for", async () => {
    const f = await fleetWithKey();
    await putGroup(f.fleet, "default", { slots: 1 });
    const [a] = await registerClients(f.fleet, 1);
    const created = await create(f.fleet, { url: "https://hooks.example.com/reboots", events: ["reboot.granted"] });
    const { secret, webhook } = created.json;
    const sent = await receiver(f.fleet, [500, 503]);

    expect((await zincati(f.baseUrl, "pre-reboot", a.id)).status).toBe(200);
    // The slot's release is an event this webhook did not ask for.
    expect((await zincati(f.baseUrl, "steady-state", a.id)).status).toBe(200);
    for (let i = 0; i < 5; i++) await fireTimersNow(coordinator(f.fleet));

    expect(sent.map((s) => s.headers.get("x-harbormaster-event"))).toEqual([
      "reboot.granted",
      "reboot.granted",
      "reboot.granted",
    ]);
    // One delivery, retried: the same id on every attempt, each signed over its timestamp and body.
    expect(new Set(sent.map((s) => s.headers.get("x-harbormaster-delivery"))).size).toBe(1);
    for (const s of sent) expect(await verify(secret, s.body, s.headers.get("x-harbormaster-signature"))).toBe(true);
    expect(await verify("another secret!!", sent[2].body, sent[2].headers.get("x-harbormaster-signature"))).toBe(false);
    const event = JSON.parse(sent[2].body);
    expect(sent[2].headers.get("content-type")).toBe("application/cloudevents+json");
    expect(event).toMatchObject({
      specversion: "1.0",
      type: "dev.harbormaster.reboot.granted",
      source: `/fleets/${f.fleet}`,
      subject: `server:${a.serverId}`,
      data: { group: "default", id: a.id, server_id: a.serverId },
    });

    const log = await call("GET", `/v1/fleets/${f.fleet}/webhooks/${webhook.id}/deliveries`);
    expect(log.json.items).toMatchObject([
      { event: "reboot.granted", status: "delivered", attempts: 3, last_status: 200, last_error: null },
    ]);
  });

  it("sends a test event on demand, in Slack's format when asked, and records a receiver's refusal", async () => {
    const f = await fleetWithKey();
    const created = await create(f.fleet, {
      url: "https://hooks.slack.example.com/T0/B0/x",
      events: ["reboot.unhealthy_after_reboot"],
      format: "slack",
    });
    const sent = await receiver(f.fleet, [404]);
    const id = created.json.webhook.id;
    const first = await call("POST", `/v1/fleets/${f.fleet}/webhooks/${id}/test`);
    // Queued, answered before any attempt; its outcome is read where Location says.
    expect(first.status).toBe(202);
    expect(first.json).toMatchObject({ event: "webhook.test", status: "pending", attempts: 0, last_status: null });
    const at = first.headers.get("location")!;
    expect(at).toBe(`/v1/fleets/${f.fleet}/webhooks/${id}/deliveries/${first.json.id}`);
    await sendsSettled(f.fleet);
    const outcome = await call("GET", at);
    expect(outcome.status).toBe(200);
    expect(outcome.json).toMatchObject({
      id: first.json.id,
      event: "webhook.test",
      status: "pending",
      attempts: 1,
      last_status: 404,
      last_error: expect.stringMatching(/HTTP 404/),
    });
    // Another webhook's delivery, or none, is not this one's.
    const other = await create(f.fleet, { url: "https://hooks.example.com/other", events: ["reboot.granted"] });
    expect(
      (await call("GET", `/v1/fleets/${f.fleet}/webhooks/${other.json.webhook.id}/deliveries/${first.json.id}`)).status,
    ).toBe(404);
    expect((await call("GET", `/v1/fleets/${f.fleet}/webhooks/${id}/deliveries/${crypto.randomUUID()}`)).status).toBe(
      404,
    );
    expect(JSON.parse(sent[0].body)).toEqual({
      text: expect.stringMatching(/^:wave: \[.+\] Test delivery to https:\/\/hooks\.slack/),
    });
    await fireTimersNow(coordinator(f.fleet));
    const log = await call("GET", `/v1/fleets/${f.fleet}/webhooks/${created.json.webhook.id}/deliveries`);
    expect(log.json.items).toMatchObject([{ status: "delivered", attempts: 2 }]);
    expect((await call("POST", `/v1/fleets/${f.fleet}/webhooks/${crypto.randomUUID()}/test`)).status).toBe(404);
  });

  it("gives a delivery up after 24 hours of failures and records why", async () => {
    const f = await fleetWithKey();
    const created = await create(f.fleet, { url: "https://hooks.example.com/down", events: ["reboot.granted"] });
    await receiver(f.fleet, [500, 500, 500]);
    await call("POST", `/v1/fleets/${f.fleet}/webhooks/${created.json.webhook.id}/test`);
    await runInDurableObject(coordinator(f.fleet), (instance) => {
      (instance as unknown as { parts: { webhooks: { clock: () => number } } }).parts.webhooks.clock = () =>
        Date.now() + 25 * 3600_000;
    });
    await fireTimersNow(coordinator(f.fleet));
    const log = await call("GET", `/v1/fleets/${f.fleet}/webhooks/${created.json.webhook.id}/deliveries`);
    expect(log.json.items).toMatchObject([
      { status: "failed", attempts: 1, last_error: expect.stringMatching(/given up after 24 h/) },
    ]);
  });
});
