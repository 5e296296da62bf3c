/**
 * What outsiders answer is read only as far as it is used: a webhook receiver or a Prometheus
 * server answering a body of any size costs the object that asked (a fleet's coordinator, a
 * rollout) at most a small prefix of it, and the rest is never pulled.
 */
import { describe, expect, it } from "vitest";
import { endless } from "./support/streams";
import { textPrefix } from "../src/lib/body";
import { prometheusCheck } from "../src/rollouts/analysis-checks";
import { call } from "./helpers";
import { fleetWithKey } from "./fleetlock-helpers";
import { createWebhook, sendsSettled } from "./webhook-helpers";
import { runInDurableObject } from "cloudflare:test";
import { coordinator } from "./support/objects";
import type { Fetcher } from "../src/webhooks/dispatch";

const MiB = 1024 * 1024;

describe("an outsider's answer, read no further than used", () => {
  it("reads a prefix and cancels the rest, and reads a short body whole", async () => {
    const big = endless(64 * MiB);
    const read = await textPrefix(new Response(big.body), 200);
    expect(read).toEqual({ text: "a".repeat(200), truncated: true });
    expect(big.seen.pulled).toBeLessThanOrEqual(256 * 1024);
    expect(big.seen.cancelled).toBe(true);
    expect(await textPrefix(new Response("short"), 200)).toEqual({ text: "short", truncated: false });
    expect(await textPrefix(new Response(null, { status: 204 }), 200)).toEqual({ text: "", truncated: false });
  });

  it("records a receiver's refusal from the first 200 bytes of its 64 MB body, pulling no more", async () => {
    const f = await fleetWithKey();
    const created = await createWebhook(f.fleet, { url: "https://hooks.example.com/huge", events: ["reboot.granted"] });
    expect(created.status).toBe(201);
    const big = endless(64 * MiB);
    const fetcher: Fetcher = async () => new Response(big.body, { status: 500 });
    await runInDurableObject(coordinator(f.fleet), (instance) => {
      (instance as unknown as { parts: { webhooks: { fetcher: Fetcher } } }).parts.webhooks.fetcher = fetcher;
    });
    const res = await call("POST", `/v1/fleets/${f.fleet}/webhooks/${created.json.webhook.id}/test`);
    expect(res.status).toBe(202);
    await sendsSettled(f.fleet);
    const outcome = await call("GET", res.headers.get("location")!);
    expect(outcome.json).toMatchObject({
      status: "pending",
      last_status: 500,
      last_error: `HTTP 500: ${"a".repeat(200)}`,
    });
    expect(big.seen.pulled).toBeLessThanOrEqual(256 * 1024);
    expect(big.seen.cancelled).toBe(true);
  });

  it("fails a Prometheus check whose answer is over 1 MiB without reading it all", async () => {
    const big = endless(64 * MiB, 0x20);
    const check = { kind: "prometheus", endpoint: "https://prom.example", query: "up", comparison: ">=", threshold: 1 };
    const result = await prometheusCheck(async () => new Response(big.body, { status: 200 }), {
      ...check,
      timeout_s: 5,
    } as Parameters<typeof prometheusCheck>[1]);
    expect(result).toMatchObject({ ok: false, reachable: true, value: null });
    expect(result.detail).toMatch(/over 1048576 bytes/);
    expect(big.seen.pulled).toBeLessThanOrEqual(2 * MiB);
    expect(big.seen.cancelled).toBe(true);
    // A real answer is still judged.
    const answer = { status: "success", data: { resultType: "vector", result: [{ metric: {}, value: [0, "1"] }] } };
    const ok = await prometheusCheck(async () => Response.json(answer), { ...check, timeout_s: 5 } as Parameters<
      typeof prometheusCheck
    >[1]);
    expect(ok).toMatchObject({ ok: true, value: 1 });
  });
  it("gives up on a Prometheus answer that starts and then stalls, at the check's deadline", async () => {
    const stalled = new ReadableStream<Uint8Array>({
      start(controller) {
        controller.enqueue(new TextEncoder().encode('{"status":'));
      },
      pull: () => new Promise(() => {}),
    });
    const check = { kind: "prometheus", endpoint: "https://prom.example", query: "up", comparison: ">=", threshold: 1 };
    const started = Date.now();
    // The stand-in ignores the fetch's signal, as a body already streaming may.
    const result = await Promise.race([
      prometheusCheck(async () => new Response(stalled, { status: 200 }), {
        ...check,
        timeout_s: 1,
      } as Parameters<typeof prometheusCheck>[1]),
      new Promise<"hung">((resolve) => setTimeout(() => resolve("hung"), 4000)),
    ]);
    expect(result).not.toBe("hung");
    expect(result).toMatchObject({ ok: false, value: null });
    expect(Date.now() - started).toBeLessThan(3000);
  });
});
