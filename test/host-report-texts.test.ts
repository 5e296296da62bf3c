import { SELF } from "cloudflare:test";
import { afterEach, describe, expect, it, vi } from "vitest";
import { InventoryReport } from "../src/model/server/schemas";
import { BASE, call, createFleet, registerServer, report, send } from "./helpers";

// The Worker remembers, per server token, the last report text a ledger accepted and the JSON text the
// route's validators made of it (src/host/report-texts.ts): the same text with the same
// Content-Type is not parsed and validated again. Counted here through the schema's safeParseAsync,
// the call the route's validator makes once per body it checks.

const agents = [{ name: "compute", image: "compute:1" }];

function put(token: string, body: string, contentType = "application/json") {
  return send(`${BASE}/v1/agent/inventory`, {
    method: "PUT",
    headers: { Authorization: `Bearer ${token}`, "Content-Type": contentType },
    body,
  });
}

async function reportingHost() {
  const fleet = await createFleet();
  const s = await registerServer(fleet.id);
  return { s, body: JSON.stringify(report(s.desired.generation, agents)) };
}

const validations = () => vi.spyOn(InventoryReport, "safeParseAsync");

afterEach(() => vi.restoreAllMocks());

describe("a report the same as the last one accepted", () => {
  it("is validated once: the same text again goes to the ledger as the text it gave, answered alike", async () => {
    const { s, body } = await reportingHost();
    const checks = validations();
    const first = await put(s.token, body);
    expect(first.status).toBe(200);
    expect(checks).toHaveBeenCalledTimes(1);
    const again = await put(s.token, body);
    expect(again.status).toBe(200);
    expect(checks).toHaveBeenCalledTimes(1);
    expect(again.json).toEqual(first.json);
    expect(again.headers.get("Content-Type")).toBe(first.headers.get("Content-Type"));
    // Taken as a report received now: the server's last_seen moved.
    const seen = (await call("GET", `/v1/servers/${s.id}`)).json.last_seen;
    expect(seen).not.toBeNull();
  });

  it("is validated again when a byte of its text or its Content-Type differs", async () => {
    const { s, body } = await reportingHost();
    expect((await put(s.token, body)).status).toBe(200);
    const checks = validations();
    expect((await put(s.token, body.replace('"boot-1"', '"boot-2"'))).status).toBe(200);
    expect(checks).toHaveBeenCalledTimes(1);
    expect((await put(s.token, body, "application/json; charset=utf-8")).status).toBe(200);
    expect(checks).toHaveBeenCalledTimes(2);
    // The text remembered is the last accepted one, so the first body is validated once more.
    expect((await put(s.token, body)).status).toBe(200);
    expect(checks).toHaveBeenCalledTimes(3);
  });

  it("is validated when sent with no Content-Length: only a body the /v1 rules read whole is looked up", async () => {
    const { s, body } = await reportingHost();
    expect((await put(s.token, body)).status).toBe(200);
    const checks = validations();
    const bytes = new TextEncoder().encode(body);
    const res = await SELF.fetch(`${BASE}/v1/agent/inventory`, {
      method: "PUT",
      headers: { Authorization: `Bearer ${s.token}`, "Content-Type": "application/json" },
      body: new ReadableStream<Uint8Array>({
        start(controller) {
          controller.enqueue(bytes);
          controller.close();
        },
      }),
    });
    expect(res.status).toBe(200);
    await res.body?.cancel();
    expect(checks).toHaveBeenCalledTimes(1);
  });

  it("is remembered for its own server only: another server's same text is validated", async () => {
    const a = await reportingHost();
    const fleet = await createFleet();
    const b = await registerServer(fleet.id);
    expect((await put(a.s.token, a.body)).status).toBe(200);
    const checks = validations();
    expect((await put(b.token, a.body)).status).toBe(200);
    expect(checks).toHaveBeenCalledTimes(1);
  });

  it("is remembered for the token that sent it only: another token's same text is validated, then refused", async () => {
    const { s, body } = await reportingHost();
    expect((await put(s.token, body)).status).toBe(200);
    const forged = s.token.replace(/.$/, (c) => (c === "A" ? "B" : "A"));
    const checks = validations();
    const res = await put(forged, body);
    expect(res.status).toBe(401);
    expect(res.json.error.code).toBe("unauthorized");
    expect(checks).toHaveBeenCalledTimes(1);
  });

  it("is refused by the ledger once the token that sent it is rotated away, and the new token's is validated", async () => {
    const { s, body } = await reportingHost();
    expect((await put(s.token, body)).status).toBe(200);
    const rotated = await call("POST", `/v1/servers/${s.id}/token`);
    expect(rotated.status).toBe(200);
    const checks = validations();
    const res = await put(s.token, body);
    expect(res.status).toBe(401);
    expect(res.json.error.code).toBe("unauthorized");
    expect(checks).not.toHaveBeenCalled();
    expect((await put(rotated.json.token, body)).status).toBe(200);
    expect(checks).toHaveBeenCalledTimes(1);
  });

  it("is not remembered when it was refused: a refused body is refused again, in the same words", async () => {
    const { s } = await reportingHost();
    const bad = JSON.stringify({ ...report(s.desired.generation, agents), agents: [{ name: "compute" }] });
    const first = await put(s.token, bad);
    expect(first.status).toBe(400);
    const checks = validations();
    const again = await put(s.token, bad);
    expect(checks).toHaveBeenCalledTimes(1);
    expect({ ...again.json, error: { ...again.json.error } }).toMatchObject({
      error: { code: first.json.error.code, message: first.json.error.message, details: first.json.error.details },
    });
  });
});
