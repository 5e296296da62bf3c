/**
 * A start's answer says what happened to the fleet's channel: its move is delivered (through the
 * rollout's outbox, to D1 alone) before the rollout is answered, so the answer, a racing identical
 * start's answer and the channel read right after all agree.
 */
import { env, runInDurableObject } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import { RolloutInput } from "../src/rollouts/schemas";
import { createRollout } from "../src/rollouts/service";
import { call } from "./helpers";
import { AGENT, fleetWithAgent, NEW, rolloutStub } from "./rollout-helpers";

const post = (body: unknown) => call("POST", "/v1/rollouts", { body });
const channelImage = async (fleet: string) => (await call("GET", `/v1/fleets/${fleet}/channels/${AGENT}`)).json.image;

describe("a rollout start's channel_updated", () => {
  it("is true in the start's own answer, with the channel already moved", async () => {
    const { fleet } = await fleetWithAgent(1);
    const res = await post({ fleet, agent: AGENT, image: NEW, version: "2.0.0" });
    expect(res.status).toBe(201);
    expect(res.json.channel_updated).toBe(true);
    expect(await channelImage(fleet)).toBe(NEW);
  });

  it("agrees between two identical starts racing", async () => {
    const { fleet } = await fleetWithAgent(2);
    const body = { fleet, agent: AGENT, image: NEW, version: "2.0.0", concurrency: 2 };
    const [a, b] = await Promise.all([post(body), post(body)]);
    expect([a.status, b.status]).toEqual([201, 201]);
    expect(b.json.id).toBe(a.json.id);
    expect([a.json.channel_updated, b.json.channel_updated]).toEqual([true, true]);
  });

  it("is true for a channel-only start, which writes no server", async () => {
    const { fleet } = await fleetWithAgent(1);
    const res = await post({ fleet, agent: AGENT, image: NEW, version: "2.0.0", channel_only: true });
    expect(res.status).toBe(201);
    expect(res.json).toMatchObject({ state: "succeeded", channel_updated: true });
    expect(await channelImage(fleet)).toBe(NEW);
  });

  it("does not wait for the ledger writes the start sends with the move", async () => {
    const { fleet } = await fleetWithAgent(1);
    const id = crypto.randomUUID();
    // The rollout's ledgers hold every write until released: the answer must not wait for them.
    let release!: () => void;
    const gate = new Promise<void>((r) => (release = r));
    let writes = 0;
    const held = {
      idFromName: (n: string) => env.LEDGER.idFromName(n),
      get: (lid: DurableObjectId) => ({
        applyRolloutImage: async (req: unknown) => {
          await gate;
          writes++;
          return (env.LEDGER.get(lid) as any).applyRolloutImage(req);
        },
      }),
    };
    const stub: DurableObjectStub = rolloutStub(id);
    await runInDurableObject(stub, (instance) => {
      const o = instance as unknown as { env: object };
      o.env = { ...o.env, LEDGER: held };
    });
    const input = RolloutInput.parse({ fleet, agent: AGENT, image: NEW, version: "2.0.0" });
    const answer = createRollout(env, "test", input, () => id);
    const first = await Promise.race([answer, new Promise((r) => setTimeout(() => r("waited"), 5_000))]);
    expect(first).toMatchObject({ id, channel_updated: true });
    expect(writes).toBe(0);
    release();
  });

  it("is false when the start asked not to move it", async () => {
    const { fleet } = await fleetWithAgent(1);
    const res = await post({ fleet, agent: AGENT, image: NEW, version: "2.0.0", update_channel: false });
    expect(res.status).toBe(201);
    expect(res.json.channel_updated).toBe(false);
  });
});
