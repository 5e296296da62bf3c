import { runInDurableObject } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import type { RolloutParts } from "../src/rollouts/parts";
import { change } from "../src/rollouts/transitions";
import { call } from "./helpers";
import { fleetWithAgent, rolloutStub, startRollout, targets } from "./rollout-helpers";

const changeOf = async (id: string) => ((await call("GET", `/v1/rollouts/${id}`)).json as { change: number }).change;

/**
 * The rollout's `change` is what a reader caches by and a long poll waits on: a step that only
 * gives a target its generation (the ledger's answer to the write) moves no count, but it moves
 * what `GET …/targets` shows, so `change` must move with it.
 */
describe("a target given its generation", () => {
  it("moves the rollout's change", async () => {
    const { fleet, hosts } = await fleetWithAgent(1);
    const r = await startRollout({ fleet, concurrency: 1 });
    const [t] = await targets(r.id);
    expect(t).toMatchObject({ state: "applying", generation: 3 });
    const before = await changeOf(r.id);
    // The write's answer once more, as the step that gave the target its generation took it.
    await runInDurableObject(rolloutStub(r.id), (instance) => {
      const p = (instance as unknown as { parts: RolloutParts }).parts;
      p.store.transaction(() => {
        const held = p.store.targets.get(0, hosts[0].id)!;
        const step = { type: "applied", generation: 3, from_image: held.from_image, from_version: held.from_version };
        expect(change(p, { ...held, generation: null }, step as never, Date.now())).not.toBeNull();
      });
    });
    const after = await changeOf(r.id);
    expect(after).toBeGreaterThan(before);
    expect((await targets(r.id))[0]).toMatchObject({ state: "applying", generation: 3 });
  });
});
