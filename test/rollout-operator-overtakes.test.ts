/**
 * A live rollout whose write to a server lands after an operator's desired PUT changed that
 * server's agent, the write sent before the PUT: the ledger keeps the operator's config and writes
 * nothing. The rollout must learn that at once, not wait out its server timeout for a report of
 * an image nobody is going to run.
 */
import { env } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import { RolloutInput } from "../src/rollouts/schemas";
import { createRollout } from "../src/rollouts/service";
import { call, settle } from "./helpers";
import {
  AGENT,
  drain,
  fleetWithAgent,
  getRollout,
  holdLedgerWrites,
  hostReconcile,
  NEW,
  targets,
} from "./rollout-helpers";
import { until } from "./support/objects";

describe("a rollout's write overtaken by an operator's desired PUT", () => {
  it("ends the target as skipped (superseded) at once, leaving the operator's image", async () => {
    const { fleet, hosts } = await fleetWithAgent(1);
    const [host] = hosts;
    const id = crypto.randomUUID();
    // The rollout's ledger calls wait at a gate: the write is sent, the PUT lands before it.
    const { calls, release } = await holdLedgerWrites(id);
    const input = RolloutInput.parse({ fleet, agent: AGENT, image: NEW, version: "2.0.0" });
    await createRollout(env, "test", input, () => id);
    await until(async () => calls.sent > 0);
    await new Promise((r) => setTimeout(r, 5));
    const mine = "registry.example/fw:9.0.0";
    const put = await call("PUT", `/v1/servers/${host.id}/desired`, {
      body: {
        generation: 3,
        agents: [
          { name: AGENT, image: mine, version: "9.0.0" },
          { name: "logs", image: "registry.example/logs:1", version: "1" },
        ],
      },
    });
    expect(put.status).toBe(200);
    release();
    await until(async () => {
      await drain(id);
      return (await targets(id)).every((t) => t.state !== "applying" || t.generation !== null);
    });
    // The host runs what the operator asked for.
    await hostReconcile(host);
    await settle(host.id);
    const desired = (await call("GET", `/v1/servers/${host.id}/desired`)).json;
    expect(desired.agents.find((a: { name: string }) => a.name === AGENT).image).toBe(mine);
    const [t] = await targets(id);
    expect([t.state, t.reason]).toEqual(["skipped", "superseded"]);
    expect((await getRollout(id)).state).toBe("succeeded");
  });
});
