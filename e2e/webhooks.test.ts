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
const port = await new Promise<number>((resolve) =>
  receiver.listen(0, "127.0.0.1", () => resolve((receiver.address() as { port: number }).port)),
);
afterAll(() => new Promise<void>((r) => receiver.close(() => r())));

describe("a webhook against a real receiver", () => {
  it("is delivered once the receiver recovers, each attempt signed, and only for the events it asked for", async () => {
    const fleet = `hook-${Date.now().toString(36)}`;
    expect((await api("POST", "/v1/fleets", { id: fleet })).status).toBe(201);
    const base = (await api("POST", `/v1/fleets/${fleet}/fleetlock-key`)).json.base_url as string;
    await api("PUT", `/v1/fleets/${fleet}/reboot-groups/default`, { slots: 1 });
    const created = await api("POST", `/v1/fleets/${fleet}/webhooks`, {
      url: `http://127.0.0.1:${port}/hook`,
      events: ["reboot.granted"],
    });
    expect(created.status).toBe(201);
    const { secret, webhook } = created.json;
    const id = `${fleet}-a`;
    expect(
      (await api("POST", "/v1/servers", { fleet, hostname: `${id}.example.com`, kind: "managed", fleetlock_id: id }))
        .status,
    ).toBe(201);
    const body = JSON.stringify({ client_params: { id, group: "default" } });
    const zincati = (op: string) =>
      fetch(new URL(`v1/${op}`, base), { method: "POST", headers: { "fleet-lock-protocol": "true" }, body });
    expect((await zincati("pre-reboot")).status).toBe(200);
    expect((await zincati("steady-state")).status).toBe(200); // reboot.released: not asked for

    // Within a second, then retried after ~1 s and ~2 s (the outbox's backoff).
    for (let i = 0; i < 100 && !received.some((r) => r.answered === 204); i++) await sleep(200);
    await sleep(1500);
    expect(received.map((r) => r.answered)).toEqual([500, 500, 204]);
    expect(received.every((r) => r.headers["x-harbormaster-event"] === "reboot.granted")).toBe(true);
    expect(new Set(received.map((r) => r.headers["x-harbormaster-delivery"])).size).toBe(1);
    for (const r of received)
      expect(verified(secret, r.body, r.headers["x-harbormaster-signature"] as string)).toBe(true);
    expect(JSON.parse(received[2].body)).toMatchObject({
      specversion: "1.0",
      type: "dev.harbormaster.reboot.granted",
      data: { id },
    });
    const log = await api("GET", `/v1/fleets/${fleet}/webhooks/${webhook.id}/deliveries`);
    expect(log.json.items).toMatchObject([{ status: "delivered", attempts: 3, last_status: 204 }]);
  });
});

/** Accepts every request and never answers: the sender's own time-out (10 s) ends each. */
const hanging = createServer(() => {});
const hangingPort = await new Promise<number>((resolve) =>
  hanging.listen(0, "127.0.0.1", () => resolve((hanging.address() as { port: number }).port)),
);
const promptly: { event: string; at: number }[] = [];
const prompt = createServer((req, res) => {
  req.resume();
  req.on("end", () => {
    promptly.push({ event: String(req.headers["x-harbormaster-event"]), at: Date.now() });
    res.writeHead(204).end();
  });
});
const promptPort = await new Promise<number>((resolve) =>
  prompt.listen(0, "127.0.0.1", () => resolve((prompt.address() as { port: number }).port)),
);
afterAll(async () => {
  hanging.closeAllConnections();
  await new Promise<void>((r) => hanging.close(() => r()));
  await new Promise<void>((r) => prompt.close(() => r()));
});

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];

describe("a receiver that never answers, or is down", () => {
  it("delays neither an operator's reboot-group PUT nor the fleet's other webhook", async () => {
    const plain = `plain-${Date.now().toString(36)}`;
    const hooked = `hung-${Date.now().toString(36)}`;
    for (const id of [plain, hooked]) expect((await api("POST", "/v1/fleets", { id })).status).toBe(201);
    const events = ["server.registered"];
    expect(
      (await api("POST", `/v1/fleets/${hooked}/webhooks`, { url: `http://127.0.0.1:${hangingPort}/hook`, events }))
        .status,
    ).toBe(201);
    expect(
      (await api("POST", `/v1/fleets/${hooked}/webhooks`, { url: `http://127.0.0.1:${promptPort}/hook`, events }))
        .status,
    ).toBe(201);
    const put = async (fleet: string, slots: number) => {
      const t0 = performance.now();
      expect((await api("PUT", `/v1/fleets/${fleet}/reboot-groups/default`, { slots })).status).toBe(200);
      return performance.now() - t0;
    };
    await put(plain, 1);
    await put(hooked, 1);
    const without: number[] = [];
    const withHanging: number[] = [];
    const delays: number[] = [];
    for (let i = 0; i < 7; i++) {
      // A registration owes the hanging receiver a fresh event each time; its send hangs for 10 s.
      expect(
        (await api("POST", "/v1/servers", { fleet: plain, hostname: `p${i}.example.com`, kind: "manual" })).status,
      ).toBe(201);
      await sleep(300);
      without.push(await put(plain, 2 + (i % 2)));
      const before = promptly.length;
      const registered = Date.now();
      expect(
        (await api("POST", "/v1/servers", { fleet: hooked, hostname: `h${i}.example.com`, kind: "manual" })).status,
      ).toBe(201);
      for (let j = 0; j < 40 && promptly.length === before; j++) await sleep(50);
      expect(promptly.length).toBe(before + 1);
      delays.push(promptly[before].at - registered);
      await sleep(Math.max(0, 300 - (Date.now() - registered)));
      withHanging.push(await put(hooked, 2 + (i % 2)));
    }
    const a = median(without);
    const b = median(withHanging);
    console.log(
      `e2e reboot-group PUT, median of 7: ${a.toFixed(1)} ms without webhooks, ${b.toFixed(1)} ms with a hanging receiver (all: ${without.map((x) => x.toFixed(0)).join("/")} vs ${withHanging.map((x) => x.toFixed(0)).join("/")}); the other webhook's event after ${delays.join(", ")} ms`,
    );
    expect(Math.max(...delays)).toBeLessThan(2000);
    // ±10 %, or 20 ms on a shared machine; a PUT that waited on the receiver would take 10 s.
    expect(b).toBeLessThanOrEqual(Math.max(a * 1.1, a + 20));
  }, 120_000);

  it("does not keep a deleted fleet's id taken: it is created again within 5 s while its receiver is down", async () => {
    const fleet = `down-${Date.now().toString(36)}`;
    expect((await api("POST", "/v1/fleets", { id: fleet })).status).toBe(201);
    // A port nothing listens on: every attempt is refused.
    const closed = createServer();
    const closedPort = await new Promise<number>((resolve) =>
      closed.listen(0, "127.0.0.1", () => resolve((closed.address() as { port: number }).port)),
    );
    await new Promise<void>((r) => closed.close(() => r()));
    const created = await api("POST", `/v1/fleets/${fleet}/webhooks`, {
      url: `http://127.0.0.1:${closedPort}/hook`,
      events: ["server.registered"],
    });
    expect(created.status).toBe(201);
    const test = await api("POST", `/v1/fleets/${fleet}/webhooks/${created.json.webhook.id}/test`);
    expect(test.json.status).toBe("pending");
    const t0 = Date.now();
    expect((await api("DELETE", `/v1/fleets/${fleet}`)).status).toBe(204);
    let again = await api("POST", "/v1/fleets", { id: fleet });
    while (again.status === 409 && Date.now() - t0 < 5000) {
      await sleep(100);
      again = await api("POST", "/v1/fleets", { id: fleet });
    }
    console.log(`e2e fleet deleted with its receiver down: created again after ${Date.now() - t0} ms`);
    expect(again.status).toBe(201);
    expect(Date.now() - t0).toBeLessThan(5000);
    expect((await api("GET", `/v1/fleets/${fleet}/webhooks`)).json.items).toEqual([]);
  });
});
