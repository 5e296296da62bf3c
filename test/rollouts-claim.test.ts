/**
 * A start request sent again (its answer lost, or the runtime killed between the (fleet, agent)
 * claim and the Rollout object's creation) converges on one rollout, started once; any other
 * request is still refused by the claim (docs/rollouts.md).
 */
import { env } from "cloudflare:test";
import { and, eq } from "drizzle-orm";
import { describe, expect, it } from "vitest";
import { getDb } from "../src/db/client";
import { rolloutLocks } from "../src/db/schema";
import { RolloutInput } from "../src/rollouts/schemas";
import { claimStart } from "../src/rollouts/service";
import { call, uniq } from "./helpers";
import { AGENT, fleetWithAgent, NEW } from "./rollout-helpers";

/** A write token: its own principal, so its requests are its own. */
async function writer() {
  const res = await call("POST", "/v1/tokens", { body: { name: uniq("roller"), scope: "write" } });
  if (res.status !== 201) throw new Error(JSON.stringify(res.json));
  return { token: res.json.token as string, actor: `token:${res.json.id}` };
}

const post = (token: string, body: unknown) => call("POST", "/v1/rollouts", { token, body });

const eventKinds = async (id: string) =>
  (await call("GET", `/v1/rollouts/${id}/events?limit=100`)).json.items.map((e: { kind: string }) => e.kind);

const claimRow = (fleet: string) =>
  getDb(env.DB).query.rolloutLocks.findFirst({
    where: and(eq(rolloutLocks.fleetId, fleet), eq(rolloutLocks.agent, AGENT)),
  });

describe("a start sent again", () => {
  it("after a crash between the claim and the start: the same request starts the claimed rollout, once; others get 409 naming it", async () => {
    const { fleet } = await fleetWithAgent(2, { server: () => ({ labels: { zone: "eu-1a", tier: "gold" } }) });
    const me = await writer();
    const labels = { zone: "eu-1a", tier: "gold" };
    const body = { fleet, agent: AGENT, image: NEW, version: "2.0.0", concurrency: 2, selector: { labels } };
    // The first half only: the claim is in D1, the object was never created.
    const cut = await claimStart(env, me.actor, RolloutInput.parse(body));
    const id = cut.spec.id;
    expect(cut.started).toBeNull();
    expect((await call("GET", `/v1/rollouts/${id}`)).status).toBe(404);

    // Another request (another image; the same body from another principal) is refused, naming the claim.
    const other = await post(me.token, { ...body, image: "registry.example/fw:3.0.0", version: "3.0.0" });
    expect(other.status).toBe(409);
    expect(other.json.error).toMatchObject({
      code: "rollout_in_progress",
      details: { rollout_id: id, state: "starting" },
    });
    const stranger = await writer();
    const theirs = await post(stranger.token, body);
    expect(theirs.status).toBe(409);
    expect(theirs.json.error.details.rollout_id).toBe(id);
    expect((await call("GET", `/v1/rollouts/${id}`)).status).toBe(404);

    // The client's own retry, its keys in another order, finishes the start under the claimed id.
    const retry = await post(me.token, {
      selector: { labels: { tier: "gold", zone: "eu-1a" } },
      concurrency: 2,
      version: "2.0.0",
      image: NEW,
      agent: AGENT,
      fleet,
    });
    expect(retry.status).toBe(201);
    expect(retry.json).toMatchObject({ id, state: "running", created_by: me.actor });
    expect(retry.json.counts.applying).toBe(2);
    expect((await call("GET", `/v1/rollouts/${id}`)).json.state).toBe("running");

    // Once more: the same rollout, not started again.
    const again = await post(me.token, body);
    expect(again.status).toBe(201);
    expect(again.json.id).toBe(id);
    expect((await eventKinds(id)).filter((k: string) => k === "rollout.running")).toHaveLength(1);
    expect((await claimRow(fleet))?.rolloutId).toBe(id);
  });

  it("after a completed start whose answer was lost: answers that rollout; a changed request is refused", async () => {
    const { fleet } = await fleetWithAgent(2);
    const me = await writer();
    const body = { fleet, agent: AGENT, image: NEW, version: "2.0.0", concurrency: 1 };
    const first = await post(me.token, body);
    expect(first.status).toBe(201);
    const second = await post(me.token, body);
    expect(second.status).toBe(201);
    expect(second.json).toMatchObject({ id: first.json.id, state: "running" });
    expect(second.json.counts).toEqual(first.json.counts);
    expect((await eventKinds(first.json.id)).filter((k: string) => k === "rollout.running")).toHaveLength(1);

    const changed = await post(me.token, { ...body, concurrency: 2 });
    expect(changed.status).toBe(409);
    expect(changed.json.error).toMatchObject({
      code: "rollout_in_progress",
      details: { rollout_id: first.json.id, state: "running" },
    });
    // A rollout that has ended is not answered to a new start, even an identical one.
    expect((await call("POST", `/v1/rollouts/${first.json.id}/cancel`, { token: me.token })).status).toBe(200);
    const afterEnd = await post(me.token, body);
    expect(afterEnd.status).toBe(409);
    expect(afterEnd.json.error.details).toMatchObject({ rollout_id: first.json.id, state: "cancelled" });
  });

  it("two identical starts racing are one start: both answer the same rollout, started once", async () => {
    const { fleet } = await fleetWithAgent(2);
    const me = await writer();
    const body = { fleet, agent: AGENT, image: NEW, version: "2.0.0", concurrency: 2 };
    const [a, b] = await Promise.all([post(me.token, body), post(me.token, body)]);
    expect([a.status, b.status]).toEqual([201, 201]);
    expect(b.json.id).toBe(a.json.id);
    expect((await eventKinds(a.json.id)).filter((k: string) => k === "rollout.running")).toHaveLength(1);
    expect((await call("GET", `/v1/rollouts/${a.json.id}`)).json.counts.applying).toBe(2);
  });

  it("renews an expired claim it adopts, so another request's takeover cannot start a second rollout", async () => {
    const { fleet } = await fleetWithAgent(1);
    const me = await writer();
    const body = { fleet, agent: AGENT, image: NEW, version: "2.0.0" };
    const cut = await claimStart(env, me.actor, RolloutInput.parse(body));
    // The claim is past its 2 minutes: a takeover would be allowed now.
    const aged = Date.now() - 10 * 60_000;
    await getDb(env.DB).update(rolloutLocks).set({ createdAt: aged }).where(eq(rolloutLocks.rolloutId, cut.spec.id));
    const retry = await post(me.token, body);
    expect(retry.status).toBe(201);
    expect(retry.json.id).toBe(cut.spec.id);
    const row = await claimRow(fleet);
    expect(row?.rolloutId).toBe(cut.spec.id);
    expect(row!.createdAt).toBeGreaterThan(aged + 5 * 60_000);
  });

  it("a claim a crash left is taken over by another request once expired", async () => {
    const { fleet } = await fleetWithAgent(1);
    const me = await writer();
    const body = { fleet, agent: AGENT, image: NEW, version: "2.0.0" };
    const cut = await claimStart(env, me.actor, RolloutInput.parse(body));
    await getDb(env.DB)
      .update(rolloutLocks)
      .set({ createdAt: Date.now() - 10 * 60_000 })
      .where(eq(rolloutLocks.rolloutId, cut.spec.id));
    const other = await post(me.token, { ...body, concurrency: 3 });
    expect(other.status).toBe(201);
    expect(other.json.id).not.toBe(cut.spec.id);
    expect((await call("GET", `/v1/rollouts/${cut.spec.id}`)).status).toBe(404);
  });
});
