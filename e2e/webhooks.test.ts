/**
 * A webhook against a real receiver on this machine (wrangler dev allows http:// to loopback in
 * local runs): the receiver fails twice, then takes the delivery; it sees the same delivery id
 * three times, each request signed, and is never sent an event it did not ask for. The signature
 * is checked with the recipe of docs/notifications.md, in Node.
 */
import { setTimeout as sleep } from "node:timers/promises";
import { createHmac, timingSafeEqual } from "node:crypto";
import { createServer, type IncomingMessage } from "node:http";
import { afterAll, describe, expect, it } from "vitest";
import { adminApi } from "./harness.ts";

const api = adminApi;

/** docs/notifications.md: HMAC-SHA256(secret, `${t}.${body}`) as hex, t within 300 s of now. */
function verified(secret: string, body: string, header: string | undefined): boolean {
  const parts = Object.fromEntries((header ?? "").split(",").map((kv) => kv.split("=", 2)));
  const t = Number(parts.t);
  if (!Number.isInteger(t) || Math.abs(Date.now() / 1000 - t) > 300 || !parts.v1) return false;
  const expected = Buffer.from(createHmac("sha256", secret).update(`${t}.${body}`).digest("hex"));
  const got = Buffer.from(parts.v1);
  return expected.length === got.length && timingSafeEqual(expected, got);
}

const received: { headers: IncomingMessage["headers"]; body: string; answered: number }[] = [];
let failuresLeft = 2;
const receiver = createServer((req, res) => {
  let body = "";
  req.on("data", (d) => (body += d));
  req.on("end", () => {
    const status = failuresLeft-- > 0 ? 500 : 204;
    received.push({ headers: req.headers, body, answered: status });
    res.writeHead(status).end();
  });
});
const port = await new Promise<number>((resolve) => receiver.listen(0, "127.0.0.1", () => resolve((receiver.address() as { port: number }).port)));
afterAll(() => new Promise<void>((r) => receiver.close(() => r())));

describe("a webhook against a real receiver", () => {
  it("is delivered once the receiver recovers, each attempt signed, and only for the events it asked for", async () => {
    const fleet = `hook-${Date.now().toString(36)}`;
    expect((await api("POST", "/v1/fleets", { id: fleet })).status).toBe(201);
    const base = (await api("POST", `/v1/fleets/${fleet}/fleetlock-key`)).json.base_url as string;
    await api("PUT", `/v1/fleets/${fleet}/reboot-groups/default`, { slots: 1 });
    const created = await api("POST", `/v1/fleets/${fleet}/webhooks`, { url: `http://127.0.0.1:${port}/hook`, events: ["reboot.granted"] });
    expect(created.status).toBe(201);
    const { secret, webhook } = created.json;
    const id = `${fleet}-a`;
    expect((await api("POST", "/v1/servers", { fleet, hostname: `${id}.example.com`, kind: "managed", fleetlock_id: id })).status).toBe(201);
    const body = JSON.stringify({ client_params: { id, group: "default" } });
    const zincati = (op: string) => fetch(new URL(`v1/${op}`, base), { method: "POST", headers: { "fleet-lock-protocol": "true" }, body });
    expect((await zincati("pre-reboot")).status).toBe(200);
    expect((await zincati("steady-state")).status).toBe(200); // reboot.released: not asked for

    // Within a second, then retried after ~1 s and ~2 s (the outbox's backoff).
    for (let i = 0; i < 100 && !received.some((r) => r.answered === 204); i++) await sleep(200);
    await sleep(1500);
    expect(received.map((r) => r.answered)).toEqual([500, 500, 204]);
    expect(received.every((r) => r.headers["x-harbormaster-event"] === "reboot.granted")).toBe(true);
    expect(new Set(received.map((r) => r.headers["x-harbormaster-delivery"])).size).toBe(1);
    for (const r of received) expect(verified(secret, r.body, r.headers["x-harbormaster-signature"] as string)).toBe(true);
    expect(JSON.parse(received[2].body)).toMatchObject({ specversion: "1.0", type: "dev.harbormaster.reboot.granted", data: { id } });
    const log = await api("GET", `/v1/fleets/${fleet}/webhooks/${webhook.id}/deliveries`);
    expect(log.json.items).toMatchObject([{ status: "delivered", attempts: 3, last_status: 204 }]);
  });
});
