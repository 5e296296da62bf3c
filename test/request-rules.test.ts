import { SELF } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import { MAX_BODY_BYTES } from "../src/domain/limits";
import { BASE, call, createFleet, registerServer, report, send } from "./helpers";

/** A report padded past the body limit (an error message of the limit's length: refused before validation). */
const oversized = () =>
  JSON.stringify({ ...report(1, []), errors: [{ op: "pull", message: "x".repeat(MAX_BODY_BYTES) }] });

describe("the /v1 body limit holds however the length is told", () => {
  it("refuses a body longer than its limit whose Content-Length claims it is short, and stores nothing", async () => {
    const fleet = await createFleet();
    const s = await registerServer(fleet.id);
    const res = await send(`${BASE}/v1/agent/inventory`, {
      method: "PUT",
      headers: { Authorization: `Bearer ${s.token}`, "Content-Type": "application/json", "Content-Length": "100" },
      body: oversized(),
    });
    expect(res.status).toBe(413);
    expect(res.json.error.code).toBe("payload_too_large");
    expect((await call("GET", `/v1/servers/${s.id}`)).json.last_seen).toBeNull();
  });

  it("refuses a body of unknown length once its bytes pass the limit", async () => {
    const fleet = await createFleet();
    const s = await registerServer(fleet.id);
    const bytes = new TextEncoder().encode(oversized());
    const stream = new ReadableStream<Uint8Array>({
      start(controller) {
        for (let i = 0; i < bytes.length; i += 64 * 1024) controller.enqueue(bytes.slice(i, i + 64 * 1024));
        controller.close();
      },
    });
    const res = await SELF.fetch(`${BASE}/v1/agent/inventory`, {
      method: "PUT",
      headers: { Authorization: `Bearer ${s.token}`, "Content-Type": "application/json" },
      body: stream,
    });
    expect(res.status).toBe(413);
    expect(((await res.json()) as { error: { code: string } }).error.code).toBe("payload_too_large");
  });

  it("reads a report of unknown length within the limit as any other", async () => {
    const fleet = await createFleet();
    const s = await registerServer(fleet.id);
    const bytes = new TextEncoder().encode(JSON.stringify(report(1, [])));
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
    expect(((await res.json()) as { desired_generation: number }).desired_generation).toBe(1);
  });
});
