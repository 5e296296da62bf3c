import { evictDurableObject, runInDurableObject } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import { call, createFleet, registerServer, report } from "./helpers";
import { closedWithin, openChannel, upgrade } from "./channel-helpers";
import { ledger, sleep } from "./support/objects";

const A = { name: "a", image: "a:1" };
const agents = [{ name: "a", image: "a:1", version: "1" }];

async function serverAt2() {
  const fleet = await createFleet();
  const s = await registerServer(fleet.id);
  await call("PUT", `/v1/servers/${s.id}/desired`, { body: { generation: 2, agents } });
  return s;
}

const reportMessage = (id: string, body: unknown) => ({ type: "report", v: 1, id, report: body });

describe("host channel: connecting", () => {
  it("opens with the server token, selects harbormaster.v1, and sends the desired config unless the host's generation is current", async () => {
    const s = await serverAt2();
    const stale = await openChannel(s.token, {
      generation: 1,
      headers: { "Sec-WebSocket-Protocol": "harbormaster.v1" },
    });
    expect(stale.response.headers.get("Sec-WebSocket-Protocol")).toBe("harbormaster.v1");
    const pushed = await stale.next("desired");
    expect(pushed).toMatchObject({
      v: 1,
      config: { server_id: s.id, generation: 2, lifecycle: "run", agents: [{ name: "a", image: "a:1" }] },
    });

    const current = await openChannel(s.token, { generation: 2 });
    await sleep(300);
    expect(current.pending()).toEqual([]);
    current.close();
  });

  it("takes the token as a subprotocol (hm-token.<token>) from clients that cannot set headers, and never echoes it", async () => {
    const s = await serverAt2();
    const ch = await openChannel(null, {
      headers: { "Sec-WebSocket-Protocol": `harbormaster.v1, hm-token.${s.token}` },
    });
    expect(ch.response.headers.get("Sec-WebSocket-Protocol")).toBe("harbormaster.v1");
    expect((await ch.next("desired")).config.generation).toBe(2);
    ch.close();
  });

  it("refuses a request without Upgrade (426), a missing or wrong token (401) and an operator token (403)", async () => {
    const s = await serverAt2();
    const plain = await call("GET", "/v1/agent/channel", { token: s.token });
    expect(plain.status).toBe(426);
    expect(plain.headers.get("Upgrade")).toBe("websocket");
    expect(plain.json.error.code).toBe("upgrade_required");
    expect((await upgrade(null)).status).toBe(401);
    const wrong = s.token.slice(0, -4) + "AAAA";
    const refused = await upgrade(wrong);
    expect(refused.status).toBe(401);
    expect(((await refused.json()) as any).error.code).toBe("unauthorized");
    expect((await upgrade("test-admin-token")).status).toBe(403);
  });

  it("keeps one socket per server: a newer connection closes the older one with 4001", async () => {
    const s = await serverAt2();
    const first = await openChannel(s.token, { generation: 2 });
    const second = await openChannel(s.token, { generation: 2 });
    expect(await closedWithin(first)).toMatchObject({ code: 4001 });
    await call("PUT", `/v1/servers/${s.id}/desired`, { body: { generation: 3, agents: [] } });
    expect((await second.next("desired")).config.generation).toBe(3);
    second.close();
  });
});

describe("host channel: pushes and reports", () => {
  it("pushes a change to a connected host, and acks its report with exactly what PUT /v1/agent/inventory answers", async () => {
    const s = await serverAt2();
    const ch = await openChannel(s.token, { generation: 2 });
    const changedAt = Date.now();
    await call("PUT", `/v1/servers/${s.id}/desired`, {
      body: { generation: 3, agents: [{ name: "a", image: "a:2", version: "2" }] },
    });
    const pushed = await ch.next("desired");
    expect(pushed.config).toMatchObject({ generation: 3, agents: [{ name: "a", image: "a:2", version: "2" }] });
    expect(Date.now() - changedAt).toBeLessThan(2_000);

    const body = report(3, [{ name: "a", image: "a:2" }]);
    ch.send(reportMessage("r-1", body));
    const ack = await ch.next("ack");
    const http = await call("PUT", "/v1/agent/inventory", { token: s.token, body });
    expect(ack).toEqual({ type: "ack", v: 1, id: "r-1", status: 200, body: http.json });
    expect(ack.body).toMatchObject({ server_id: s.id, desired_generation: 3, status: "realized" });
    const view = await call("GET", `/v1/servers/${s.id}`);
    expect(view.json.status).toBe("realized");
    ch.close();
  });

  it("acks a report the HTTP route would refuse with that refusal: 409 generation_not_issued, 400 with the same code and paths", async () => {
    const s = await serverAt2();
    const ch = await openChannel(s.token, { generation: 2 });
    ch.send(reportMessage("ahead", report(9, [A])));
    const ahead = await ch.next("ack");
    const httpAhead = await call("PUT", "/v1/agent/inventory", { token: s.token, body: report(9, [A]) });
    expect(ahead).toMatchObject({
      id: "ahead",
      status: 409,
      error: { code: "generation_not_issued", details: { desired_generation: 2 } },
    });
    expect(httpAhead.status).toBe(409);
    expect(ahead.error).toEqual({
      code: httpAhead.json.error.code,
      message: httpAhead.json.error.message,
      details: httpAhead.json.error.details,
    });

    const invalid = { ...report(2, [A, A]), extra: true };
    ch.send(reportMessage("bad", invalid));
    const bad = await ch.next("ack");
    const httpBad = await call("PUT", "/v1/agent/inventory", { token: s.token, body: invalid });
    expect(bad.status).toBe(400);
    expect(bad.status).toBe(httpBad.status);
    expect(bad.error).toEqual({
      code: httpBad.json.error.code,
      message: httpBad.json.error.message,
      details: httpBad.json.error.details,
    });
    ch.close();
  });

  it("tells a connected host of an operator's refresh, and its next report answers it", async () => {
    const s = await serverAt2();
    const ch = await openChannel(s.token, { generation: 2 });
    const req = await call("POST", `/v1/servers/${s.id}/refresh`);
    expect(await ch.next("refresh")).toMatchObject({ v: 1, requested_at: req.json.refresh.requested_at });
    ch.send(reportMessage("r", report(2, [A])));
    expect((await ch.next("ack")).status).toBe(200);
    expect((await call("GET", `/v1/servers/${s.id}`)).json.refresh.answered_at).not.toBeNull();
    ch.close();
  });

  it("sends a decommission order as `lifecycle`, and closes with 4410 once the host's report acknowledged it", async () => {
    const s = await serverAt2();
    const ch = await openChannel(s.token, { generation: 2 });
    await call("POST", `/v1/servers/${s.id}/decommission`);
    const order = await ch.next("lifecycle");
    expect(order).toMatchObject({ order: "terminate", config: { generation: 3, lifecycle: "terminate", agents: [] } });
    ch.send(reportMessage("bye", report(3, [])));
    expect(await ch.next("ack")).toMatchObject({ status: 200, body: { desired_generation: 3 } });
    expect(await closedWithin(ch)).toMatchObject({ code: 4410 });
  });
});

describe("host channel: tokens", () => {
  it("closes the socket of a revoked token with 4401, refuses its reconnection (401), and refuses a message that crossed the revocation", async () => {
    const s = await serverAt2();
    const ch = await openChannel(s.token, { generation: 2 });
    expect((await call("DELETE", `/v1/tokens/${s.id}`)).status).toBe(200);
    expect(await closedWithin(ch)).toMatchObject({ code: 4401 });
    expect((await upgrade(s.token)).status).toBe(401);

    // A message already on its way when the token went: the ledger refuses it, changes nothing, and closes.
    const t = await serverAt2();
    const racing = await openChannel(t.token, { generation: 2 });
    await runInDurableObject(ledger(t.id), (_i, state) => {
      const record = state.storage.kv.get<Record<string, unknown>>("record")!;
      state.storage.kv.put("record", { ...record, token_hash: "" });
    });
    await evictDurableObject(ledger(t.id));
    racing.send(reportMessage("late", report(2, [A])));
    expect(await racing.next("ack")).toMatchObject({ id: "late", status: 401, error: { code: "unauthorized" } });
    expect(await closedWithin(racing)).toMatchObject({ code: 4401 });
    const view = await runInDurableObject(ledger(t.id), (_i, state) => state.storage.kv.get("report"));
    expect(view).toBeUndefined();
  });

  it("closes the socket when the token is rotated (4401); the new token connects", async () => {
    const s = await serverAt2();
    const ch = await openChannel(s.token, { generation: 2 });
    const rotated = await call("POST", `/v1/servers/${s.id}/token`);
    expect(await closedWithin(ch)).toMatchObject({ code: 4401 });
    const fresh = await openChannel(rotated.json.token, { generation: 2 });
    fresh.close();
  });
});

describe("host channel: bad messages", () => {
  it("answers malformed, oversized, binary, unknown and wrong-version messages with an error, changes nothing and stays open", async () => {
    const s = await serverAt2();
    await call("PUT", "/v1/agent/inventory", { token: s.token, body: report(2, [A]) });
    const before = (await call("GET", `/v1/servers/${s.id}`)).headers.get("ETag");
    const ch = await openChannel(s.token, { generation: 2 });
    const cases: [unknown, string][] = [
      ["{not json", "malformed_json"],
      [
        JSON.stringify({ type: "report", v: 1, id: "big", report: { pad: "x".repeat(1024 * 1024) } }),
        "payload_too_large",
      ],
      [JSON.stringify({ type: "launch", v: 1 }), "validation_failed"],
      [JSON.stringify({ type: "report", v: 2, id: "v2", report: report(2, []) }), "validation_failed"],
      [JSON.stringify({ type: "report", v: 1, report: report(2, []) }), "validation_failed"],
      [JSON.stringify([1, 2]), "validation_failed"],
    ];
    for (const [raw, code] of cases) {
      ch.send(raw);
      expect((await ch.next("error")).error.code, String(raw).slice(0, 40)).toBe(code);
    }
    ch.ws.send(new Uint8Array([1, 2, 3]));
    expect((await ch.next("error")).error.code).toBe("unsupported_media_type");
    // Still open and still heard: a good report after all that is acked.
    ch.send(reportMessage("ok", report(2, [A])));
    expect((await ch.next("ack")).status).toBe(200);
    expect((await call("GET", `/v1/servers/${s.id}`)).headers.get("ETag")).toBe(before);
    ch.close();
  });

  it("closes a flooding socket with 1008, counting across an eviction", async () => {
    const s = await serverAt2();
    const ch = await openChannel(s.token, { generation: 2 });
    for (let i = 0; i < 20; i++) ch.send({ type: "hello", v: 1, generation: 2 });
    await sleep(300);
    await evictDurableObject(ledger(s.id));
    for (let i = 0; i < 11; i++) ch.send({ type: "hello", v: 1, generation: 2 });
    expect(await closedWithin(ch)).toMatchObject({ code: 1008 });
  });
});

describe("host channel: hibernation", () => {
  it("answers keep-alive pings without waking the ledger, and still delivers the next change after an eviction", async () => {
    const s = await serverAt2();
    const ch = await openChannel(s.token, { generation: 2 });
    await evictDurableObject(ledger(s.id));
    ch.send("ping");
    expect(await ch.next("raw")).toEqual({ type: "raw", data: "pong" });
    // The ping did not start the ledger again: there is nothing running to evict.
    await expect(evictDurableObject(ledger(s.id))).rejects.toThrow();

    await call("PUT", `/v1/servers/${s.id}/desired`, { body: { generation: 3, agents: [] } });
    expect((await ch.next("desired")).config.generation).toBe(3);
    await evictDurableObject(ledger(s.id));
    ch.send(reportMessage("after", report(3, [])));
    expect(await ch.next("ack")).toMatchObject({ status: 200, body: { status: "realized" } });
    ch.close();
  });
});
