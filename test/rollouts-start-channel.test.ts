/**
 * A start's answer and the channel move it queues: the answer does not wait for the move (a D1 write
 * the rollout's outbox delivers) nor for the servers' writes, so it says `null` until the move is
 * confirmed; the rollout read after its outbox delivered says `true`, and the channel holds the image.
 */
import { env } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import { RolloutInput } from "../src/rollouts/schemas";
import { createRollout } from "../src/rollouts/service";
import { call } from "./helpers";
import { AGENT, fleetWithAgent, getRollout, holdLedgerWrites, NEW } from "./rollout-helpers";

const post = (body: unknown) => call("POST", "/v1/rollouts", { body });
const channelImage = async (fleet: string) => (await call("GET", `/v1/fleets/${fleet}/channels/${AGENT}`)).json.image;

describe("a rollout start's channel_updated", () => {
  it("is true once the queued move is delivered, with the channel moved", async () => {
    const { fleet } = await fleetWithAgent(1);
    const res = await post({ fleet, agent: AGENT, image: NEW, version: "2.0.0" });
    expect(res.status).toBe(201);
    expect([null, true]).toContain(res.json.channel_updated);
    expect((await getRollout(res.json.id)).channel_updated).toBe(true);
    expect(await channelImage(fleet)).toBe(NEW);
  });

  it("is never false for two identical starts racing, and true once delivered", async () => {
    const { fleet } = await fleetWithAgent(2);
    const body = { fleet, agent: AGENT, image: NEW, version: "2.0.0", concurrency: 2 };
    const [a, b] = await Promise.all([post(body), post(body)]);
    expect([a.status, b.status]).toEqual([201, 201]);
    expect(b.json.id).toBe(a.json.id);
    for (const r of [a, b]) expect([null, true]).toContain(r.json.channel_updated);
    expect((await getRollout(a.json.id)).channel_updated).toBe(true);
  });

  it("answers before the move and the ledger writes are delivered", async () => {
    const { fleet } = await fleetWithAgent(1);
    const id = crypto.randomUUID();
    // The rollout's ledgers hold every write until released: the answer must not wait for them.
    const { calls, release } = await holdLedgerWrites(id);
    const input = RolloutInput.parse({ fleet, agent: AGENT, image: NEW, version: "2.0.0" });
    const answer = createRollout(env, "test", input, () => id);
    const first = await Promise.race([answer, new Promise((r) => setTimeout(() => r("waited"), 5_000))]);
    expect(first).toMatchObject({ id, channel_updated: null });
    expect(calls.landed).toBe(0);
    release();
  });

  it("is false when the start asked not to move it", async () => {
    const { fleet } = await fleetWithAgent(1);
    const res = await post({ fleet, agent: AGENT, image: NEW, version: "2.0.0", update_channel: false });
    expect(res.status).toBe(201);
    expect(res.json.channel_updated).toBe(false);
    expect((await getRollout(res.json.id)).channel_updated).toBe(false);
  });
});
