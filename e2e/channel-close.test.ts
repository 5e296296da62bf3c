/**
 * The channel's close handshake over the real server (wrangler dev), with a standard client (the
 * `ws` package): a close is complete only when the client sees `close`, not just the frame. A
 * half-closed socket keeps a connection, and a file, per reconnecting host.
 */
import { describe, expect, inject, it } from "vitest";
import WebSocket from "ws";
import { adminApi as api } from "./harness.ts";

const url = new URL(inject("hmUrl"));
const wsUrl = new URL("/v1/agent/channel", url.href.replace(/^http/, "ws"));
const uniq = (p: string) => `${p}-${Date.now().toString(36)}-${Math.random().toString(36).slice(2, 7)}`;

async function registered() {
  const fleet = uniq("close");
  expect((await api("POST", "/v1/fleets", { id: fleet })).status).toBe(201);
  const s = (await api("POST", "/v1/servers", { fleet, hostname: `${fleet}.example.com`, kind: "managed" })).json;
  return s as { id: string; token: string };
}

/** A channel socket; `closed` resolves with the code once the client saw `close`, or "still closing" after `ms`. */
async function channel(token: string) {
  // ws gives up on a silent peer after 30 s by default: far past what the test waits.
  const ws = new WebSocket(wsUrl, ["harbormaster.v1", `hm-token.${token}`]);
  ws.on("error", () => {});
  const closed = new Promise<number>((resolve) => ws.on("close", (code) => resolve(code)));
  await new Promise<void>((resolve, reject) => {
    ws.on("open", () => resolve());
    ws.on("unexpected-response", () => reject(new Error("channel refused")));
  });
  const within = (ms: number) =>
    Promise.race([
      closed,
      new Promise<string>((r) => setTimeout(() => r(`state ${ws.readyState} after ${ms} ms`), ms)),
    ]);
  return { ws, within };
}

describe("the channel's close handshake", () => {
  it("answers a host's close: the client sees close within seconds, not after its own timeout", async () => {
    const s = await registered();
    const c = await channel(s.token);
    c.ws.close(1000, "host going away");
    expect(await c.within(5_000)).toBe(1000);
    // The server saw it go: a new socket opens and is the one the ledger keeps.
    const again = await channel(s.token);
    again.ws.close();
    expect(await again.within(5_000)).toBe(1000);
  });
});
