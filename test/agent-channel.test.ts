import { evictDurableObject } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import { connectThroughFetch } from "../agent/channel";
import { MemoryDriver } from "../agent/memory-driver";
import { call, createFleet, registerServer } from "./helpers";
import { reported, runAgent, workerFetch } from "./agent-helpers";
import { ledger } from "./support/objects";

const agents = (...names: string[]) => names.map((n) => ({ name: n, image: `reg/${n}:1`, version: "1" }));

describe("reference host agent over the channel (against the worker)", () => {
  it("converges, then reconciles and reports a pushed change within moments, without polling", async () => {
    const fleet = await createFleet();
    const s = await registerServer(fleet.id);
    await call("PUT", `/v1/servers/${s.id}/desired`, { body: { generation: 2, agents: agents("compute") } });
    const driver = new MemoryDriver();
    const run = runAgent(s.token, driver);
    try {
      await run.until(reported(2, "realized"));
      const changedAt = Date.now();
      await call("PUT", `/v1/servers/${s.id}/desired`, {
        body: { generation: 3, agents: [{ name: "compute", image: "reg/compute:2", version: "2" }] },
      });
      await run.until(reported(3, "realized"));
      expect(Date.now() - changedAt).toBeLessThan(2_000);
    } finally {
      run.stop();
    }
    expect(await run.exit).toEqual({ reason: "aborted" });
    expect(run.events.filter((e) => e.type === "desired")).toEqual([]);
    expect(run.events.filter((e) => e.type === "pushed").map((e) => e.type === "pushed" && e.generation)).toEqual([
      2, 3,
    ]);
    expect(run.events.filter((e) => e.type === "channel").map((e) => e.type === "channel" && e.state)).toEqual([
      "open",
    ]);
  });

  it("falls back to the HTTP long poll while the upgrade is refused, and comes back to the channel", async () => {
    const fleet = await createFleet();
    const s = await registerServer(fleet.id);
    await call("PUT", `/v1/servers/${s.id}/desired`, { body: { generation: 2, agents: agents("compute") } });
    let attempts = 0;
    const real = connectThroughFetch(workerFetch);
    const run = runAgent(s.token, new MemoryDriver(), {
      // The first upgrade is refused (a proxy that strips Upgrade, say); later ones go through.
      connect: (url, init) => (++attempts === 1 ? Promise.reject(new Error("upgrade refused")) : real(url, init)),
      reconnect: { baseMs: 1_500, capMs: 1_500 },
      random: () => 1,
    });
    try {
      await run.until(reported(2, "realized"));
      await run.until((e) => e.type === "channel" && e.state === "open");
      await call("PUT", `/v1/servers/${s.id}/desired`, { body: { generation: 3, agents: [] } });
      await run.until(reported(3, "realized"));
    } finally {
      run.stop();
    }
    await run.exit;
    const kinds = run.events
      .filter((e) => ["channel", "desired", "pushed", "reported"].includes(e.type))
      .map((e) => (e.type === "channel" ? `channel ${e.state}` : e.type));
    // Refused, then polled and reported over HTTP, then the channel, where generation 3 was pushed.
    expect(kinds.slice(0, 3)).toEqual(["channel closed", "desired", "reported"]);
    expect(kinds.indexOf("channel open")).toBeGreaterThan(2);
    expect(kinds.slice(kinds.indexOf("channel open"))).toContain("pushed");
    expect(attempts).toBe(2);
  });

  it("reconnects after its socket drops, resuming from the generation it holds", async () => {
    const fleet = await createFleet();
    const s = await registerServer(fleet.id);
    await call("PUT", `/v1/servers/${s.id}/desired`, { body: { generation: 2, agents: agents("compute") } });
    const run = runAgent(s.token, new MemoryDriver(), { reconnect: { baseMs: 200, capMs: 200 } });
    try {
      await run.until(reported(2, "realized"));
      await evictDurableObject(ledger(s.id), { webSockets: "close" });
      await run.until((e) => e.type === "channel" && e.state === "closed");
      await run.until(() => run.events.filter((x) => x.type === "channel" && x.state === "open").length === 2);
      await call("PUT", `/v1/servers/${s.id}/desired`, { body: { generation: 3, agents: [] } });
      await run.until(reported(3, "realized"));
    } finally {
      run.stop();
    }
    await run.exit;
    // Generation 2 was current when it came back: only the change was pushed again.
    expect(run.events.filter((e) => e.type === "pushed").map((e) => e.type === "pushed" && e.generation)).toEqual([
      2, 3,
    ]);
  });

  it("ends its loop as unauthorized when the channel is closed for a revoked token", async () => {
    const fleet = await createFleet();
    const s = await registerServer(fleet.id);
    const run = runAgent(s.token, new MemoryDriver());
    await run.until(reported(1));
    await call("DELETE", `/v1/tokens/${s.id}`);
    expect(await run.exit).toMatchObject({ reason: "unauthorized", message: expect.stringContaining("revoked") });
  });
});
