/**
 * A cancelled decommission gives the server back the agents it ran before, as a new choice for
 * them: a rollout's write sent before it (held on its way, landing after the cancel) writes
 * nothing, as a write sent before an operator's PUT or the planner's change does.
 */
import { env } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import { RolloutInput } from "../src/rollouts/schemas";
import { createRollout } from "../src/rollouts/service";
import { call, settle } from "./helpers";
import { AGENT, drain, fleetWithAgent, getRollout, holdLedgerWrites, OLD, targets } from "./rollout-helpers";
import { until } from "./support/objects";

const desiredAgent = async (id: string) =>
  ((await call("GET", `/v1/servers/${id}/desired`)).json.agents as { name: string; image: string }[]).find(
    (a) => a.name === AGENT,
  );

describe("a decommission cancelled while a rollout's write is on its way", () => {
  it("keeps the restored agents: the write sent before the cancel lands as superseded", async () => {
    const { fleet, hosts } = await fleetWithAgent(1);
    const [host] = hosts;
    const id = crypto.randomUUID();
    const { calls, release } = await holdLedgerWrites(id);
    const input = RolloutInput.parse({ fleet, agent: AGENT, image: "registry.example/fw:2.0.0", version: "2.0.0" });
    await createRollout(env, "test", input, () => id);
    await until(async () => calls.sent > 0);
    await new Promise((r) => setTimeout(r, 5));

    expect((await call("POST", `/v1/servers/${host.id}/decommission`, { body: {} })).status).toBe(200);
    expect((await call("POST", `/v1/servers/${host.id}/decommission/cancel`, { body: {} })).status).toBe(200);
    await settle(host.id);
    const restored = (await call("GET", `/v1/servers/${host.id}/desired`)).json.generation as number;
    expect(await desiredAgent(host.id)).toMatchObject({ image: OLD });

    release();
    await until(async () => calls.landed > 0);
    await drain(id);
    // The restored config stands: nothing written after it.
    expect(await desiredAgent(host.id)).toMatchObject({ image: OLD });
    expect((await call("GET", `/v1/servers/${host.id}/desired`)).json.generation).toBe(restored);
    await until(async () => (await targets(id))[0].state === "skipped");
    expect((await targets(id))[0].reason).toBe("superseded");
    expect((await getRollout(id)).state).toBe("succeeded");
  });
});
