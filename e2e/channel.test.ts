import { describe, expect, inject, it } from "vitest";
import { HostAgent, type AgentEvent } from "../agent/agent.ts";
import { connectWebSocket, type ChannelConnector } from "../agent/channel.ts";
import { MemoryDriver } from "../agent/memory-driver.ts";
import { Api } from "../cli/api.ts";

const url = inject("hmUrl");
const admin = inject("hmAdmin");
const api = new Api(url, admin);

async function server(fleet: string) {
  const s = await api.registerServer({
    fleet,
    hostname: `h-${Math.random().toString(36).slice(2)}.example.com`,
    kind: "managed",
  });
  await api.putDesired(s.id, { generation: 2, agents: [{ name: "a", image: "reg/a:1", version: "1" }] });
  return s;
}

/** Node's own WebSocket (undici), as a deployed agent uses it, against a real local server. */
function start(token: string, extra: Partial<ConstructorParameters<typeof HostAgent>[0]> = {}) {
  const events: AgentEvent[] = [];
  const stop = new AbortController();
  const exit = new HostAgent({
    url,
    token,
    driver: new MemoryDriver(),
    bootId: "e2e",
    onEvent: (e) => events.push(e),
    ...extra,
  }).run(stop.signal);
  const until = async (pred: (e: AgentEvent) => boolean, ms = 15_000) => {
    const deadline = Date.now() + ms;
    while (!events.some(pred)) {
      if (Date.now() > deadline) throw new Error(`timed out; events: ${events.map((e) => e.type).join(" ")}`);
      await new Promise((r) => setTimeout(r, 50));
    }
  };
  return { events, until, exit, stop: () => stop.abort() };
}

const reported = (generation: number) => (e: AgentEvent) =>
  e.type === "reported" && e.generation === generation && e.accepted.status === "realized";

describe("host channel from Node (the runtime's WebSocket against wrangler dev)", () => {
  const fleet = `chan-${Date.now().toString(36)}`;

  it("connects with the token in Authorization or as a subprotocol, and gets a change pushed within a second", async () => {
    await api.createFleet({ id: fleet });
    for (const tokenIn of ["header", "protocol"] as const) {
      const s = await server(fleet);
      const run = start(s.token, { tokenIn });
      try {
        await run.until(reported(2));
        const at = Date.now();
        await api.putDesired(s.id, { generation: 3, agents: [] });
        await run.until(reported(3));
        expect(Date.now() - at).toBeLessThan(3_000);
        const pushed = run.events.filter((e) => e.type === "pushed");
        expect(pushed.map((e) => e.type === "pushed" && e.generation)).toEqual([2, 3]);
        expect(run.events.some((e) => e.type === "desired")).toBe(false);
      } finally {
        run.stop();
      }
      expect(await run.exit).toEqual({ reason: "aborted" });
    }
  });

  it("falls back to the HTTP long poll while the server refuses the upgrade, then comes back to the channel", async () => {
    const s = await server(fleet);
    let attempts = 0;
    // The first upgrade goes where the server refuses it (404), as a proxy that does not pass
    // WebSockets would; later ones reach the channel.
    const connect: ChannelConnector = (target, init) =>
      connectWebSocket(++attempts === 1 ? target.replace("/v1/agent/channel", "/v1/agent/no-channel") : target, init);
    const run = start(s.token, { connect, reconnect: { baseMs: 2_000, capMs: 2_000 }, random: () => 1 });
    try {
      await run.until(reported(2));
      await run.until((e) => e.type === "channel" && e.state === "open");
      await api.putDesired(s.id, { generation: 3, agents: [] });
      await run.until(reported(3));
    } finally {
      run.stop();
    }
    await run.exit;
    const kinds = run.events
      .filter((e) => ["channel", "desired", "pushed"].includes(e.type))
      .map((e) => (e.type === "channel" ? `channel ${e.state}` : e.type));
    expect(kinds[0]).toBe("channel closed");
    expect(kinds.indexOf("desired")).toBeLessThan(kinds.indexOf("channel open"));
    expect(kinds.at(-1)).toBe("pushed");
    expect(attempts).toBe(2);
  });
});
