/**
 * A rollout's targets on servers the planner drives (the fleet's roles and channels): a change of
 * intent that takes the agent off a server, or puts it back at another image, is a newer choice
 * for the agent than a rollout write sent before it, exactly as an operator's desired PUT is
 * (rollout-operator-overtakes.test.ts). The rollout's own move of the fleet's channel is not such a
 * choice: the planner keeps the image of an agent a server runs, so it never moves a target.
 */
import { env, runInDurableObject } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import { RolloutInput } from "../src/rollouts/schemas";
import { createRollout } from "../src/rollouts/service";
import { call, createFleet, registerServer, settle } from "./helpers";
import {
  AGENT,
  drain,
  getRollout,
  holdLedgerWrites,
  hostReconcile,
  NEW,
  OLD,
  reconcileApplying,
  startRollout,
  targets,
  type Host,
} from "./rollout-helpers";
import { ledger, until } from "./support/objects";

const LOGS = "registry.example/logs:1";

async function put(path: string, body: unknown) {
  const res = await call("PUT", path, { body });
  if (res.status !== 200 && res.status !== 201) throw new Error(`${path}: ${res.status} ${JSON.stringify(res.json)}`);
  return res.json;
}

const setChannel = (fleet: string, agent: string, image: string, version: string) =>
  put(`/v1/fleets/${fleet}/channels/${agent}`, { image, version });

const setRole = (fleet: string, role: string, agents: string[]) =>
  put(`/v1/fleets/${fleet}/roles/${role}`, { agents: agents.map((name) => ({ name })) });

/** A fleet whose `n` servers run AGENT at OLD and logs through the role `edge` (planned, not pinned). */
async function plannedFleet(n: number) {
  const { id: fleet } = await createFleet();
  await setChannel(fleet, AGENT, OLD, "1.0.0");
  await setChannel(fleet, "logs", LOGS, "1");
  await setChannel(fleet, "metrics", "registry.example/metrics:1", "1");
  await setRole(fleet, "edge", [AGENT, "logs"]);
  const hosts: Host[] = [];
  for (let i = 0; i < n; i++) {
    const hostname = `edge-${i}-${Math.random().toString(36).slice(2, 7)}.example.com`;
    const s = await registerServer(fleet, { hostname, roles: ["edge"] });
    hosts.push({ id: s.id, token: s.token, hostname });
    await hostReconcile(hosts[i]);
  }
  return { fleet, hosts };
}

const desiredAgents = async (serverId: string) =>
  ((await call("GET", `/v1/servers/${serverId}/desired`)).json.agents as { name: string; image: string }[])
    .map((a) => `${a.name}=${a.image}`)
    .sort();

/** A rollout of AGENT to NEW started with its ledger writes held: sent, landing once `release` runs. */
async function heldRollout(fleet: string, extra: Record<string, unknown> = {}) {
  const id = crypto.randomUUID();
  const { calls, release } = await holdLedgerWrites(id);
  const input = RolloutInput.parse({ fleet, agent: AGENT, image: NEW, version: "2.0.0", ...extra });
  await createRollout(env, "test", input, () => id);
  await until(async () => calls.sent > 0);
  // The rollout's clock when it sent them is behind whatever the test does next.
  await new Promise((r) => setTimeout(r, 5));
  return { id, release };
}

const marks = (serverId: string) =>
  runInDurableObject(ledger(serverId), (_i, state) =>
    state.storage.kv.get<Record<string, { rollout_id: string; settled?: true }>>("rollout_marks"),
  );

describe("the planner takes the agent off a server whose rollout write landed", () => {
  it("skips the target as superseded at once when a role change drops the agent", async () => {
    const { fleet, hosts } = await plannedFleet(2);
    const r = await startRollout({ fleet, concurrency: 1, abort: { max_failures: 0 } });
    const [first] = await targets(r.id, "?state=applying");
    expect(first).toMatchObject({ generation: 2 });
    await setRole(fleet, "edge", ["logs"]);
    expect(await desiredAgents(first.server_id)).toEqual([`logs=${LOGS}`]);
    // Within moments, not at the target's server timeout (an hour by default).
    await until(async () =>
      (await targets(r.id)).some((t) => t.server_id === first.server_id && t.state === "skipped"),
    );
    const t = (await targets(r.id)).find((x) => x.server_id === first.server_id)!;
    expect([t.state, t.reason, t.generation]).toEqual(["skipped", "superseded", 2]);
    // Owed nothing any more: the agent's mark goes with the agent.
    expect(Object.keys((await marks(first.server_id)) ?? {})).not.toContain(AGENT);
    // The other server lost the agent too before its turn: nothing to write there.
    await drain(r.id);
    const other = (await targets(r.id)).find((x) => x.server_id !== first.server_id)!;
    expect([other.state, other.reason]).toEqual(["skipped", "agent_absent"]);
    for (const h of hosts) await hostReconcile(h);
    const done = await getRollout(r.id);
    expect(done.state).toBe("succeeded");
    expect(done.counts).toMatchObject({ skipped: 2, timed_out: 0, failed: 0 });
  });

  it("skips the target as superseded at once when the server's roles no longer ask for the agent", async () => {
    const { fleet, hosts } = await plannedFleet(1);
    const r = await startRollout({ fleet, concurrency: 1 });
    const [host] = hosts;
    expect((await targets(r.id))[0]).toMatchObject({ state: "applying", generation: 2 });
    const patch = await call("PATCH", `/v1/servers/${host.id}`, { body: { roles: [] } });
    expect(patch.status).toBe(200);
    expect(await desiredAgents(host.id)).toEqual([]);
    await until(async () => (await targets(r.id))[0].state === "skipped");
    expect((await targets(r.id))[0].reason).toBe("superseded");
    expect((await getRollout(r.id)).state).toBe("succeeded");
  });
});

describe("a rollout's write landing after the planner chose the agent's image anew", () => {
  it("writes nothing when the agent was dropped and brought back at another image meanwhile", async () => {
    const { fleet, hosts } = await plannedFleet(1);
    const [host] = hosts;
    const { id, release } = await heldRollout(fleet, { update_channel: false });
    // The write is on its way; the operator drops the agent, moves its channel, and brings it back.
    const mine = "registry.example/fw:9.0.0";
    await setRole(fleet, "edge", ["logs"]);
    await setChannel(fleet, AGENT, mine, "9.0.0");
    await setRole(fleet, "edge", [AGENT, "logs"]);
    expect(await desiredAgents(host.id)).toEqual([`${AGENT}=${mine}`, `logs=${LOGS}`]);
    release();
    await until(async () => {
      await drain(id);
      return (await targets(id)).every((t) => t.state !== "applying" || t.generation !== null);
    });
    expect(await desiredAgents(host.id)).toEqual([`${AGENT}=${mine}`, `logs=${LOGS}`]);
    const [t] = await targets(id);
    expect([t.state, t.reason]).toEqual(["skipped", "superseded"]);
    await hostReconcile(host);
    await settle(host.id);
    expect((await getRollout(id)).state).toBe("succeeded");
  });
});

describe("the planner applying the rollout's own channel move", () => {
  it("leaves a rollout write sent before it to land, and the target to finish done", async () => {
    const { fleet, hosts } = await plannedFleet(1);
    const [host] = hosts;
    const { id, release } = await heldRollout(fleet);
    const channel = async () => (await call("GET", `/v1/fleets/${fleet}/channels/${AGENT}`)).json.image;
    await until(async () => (await channel()) === NEW);
    // A role change re-plans the target while its write is on its way: the planner's inputs carry
    // the rollout's channel, and the config it issues keeps the agent at the image the server runs.
    await setRole(fleet, "edge", [AGENT, "logs", "metrics"]);
    expect(await desiredAgents(host.id)).toEqual([
      `${AGENT}=${OLD}`,
      `logs=${LOGS}`,
      "metrics=registry.example/metrics:1",
    ]);
    // A server registered meanwhile is set up with the rollout's image, from its channel.
    const fresh = await registerServer(fleet, { roles: ["edge"] });
    expect(await desiredAgents(fresh.id)).toContain(`${AGENT}=${NEW}`);
    release();
    await until(async () => {
      await drain(id);
      return (await targets(id)).every((t) => t.state !== "applying" || t.generation !== null);
    });
    expect((await targets(id))[0]).toMatchObject({ state: "applying", generation: 3 });
    expect(await desiredAgents(host.id)).toContain(`${AGENT}=${NEW}`);
    await reconcileApplying(id, hosts);
    const done = await getRollout(id);
    expect(done.state).toBe("succeeded");
    expect(done.counts).toMatchObject({ done: 1, skipped: 0 });
  });

  it("settles nothing for a planner write that leaves the agent at the rollout's image", async () => {
    const { fleet, hosts } = await plannedFleet(2);
    const r = await startRollout({ fleet, concurrency: 1 });
    const [first] = await targets(r.id, "?state=applying");
    expect(first).toMatchObject({ generation: 2 });
    expect((await getRollout(r.id)).channel_updated).toBe(true);
    // Both servers are re-planned: the applying one keeps the rollout's image, the queued one its old one.
    await setRole(fleet, "edge", [AGENT, "logs", "metrics"]);
    expect(await desiredAgents(first.server_id)).toContain(`${AGENT}=${NEW}`);
    const queued = hosts.find((h) => h.id !== first.server_id)!;
    expect(await desiredAgents(queued.id)).toContain(`${AGENT}=${OLD}`);
    await drain(r.id);
    expect((await targets(r.id)).find((t) => t.server_id === first.server_id)).toMatchObject({
      state: "applying",
      generation: 2,
    });
    expect((await marks(first.server_id))?.[AGENT]).toMatchObject({ rollout_id: r.id });
    expect((await marks(first.server_id))?.[AGENT]?.settled).toBeUndefined();
    // The host's report of the planner's newer generation realizes the rollout's image; the next
    // target is written over the planner's config.
    while (await reconcileApplying(r.id, hosts));
    const done = await getRollout(r.id);
    expect(done.state).toBe("succeeded");
    expect(done.counts).toMatchObject({ done: 2, skipped: 0 });
    expect(await desiredAgents(queued.id)).toContain(`${AGENT}=${NEW}`);
  });
});

describe("re-plans that leave a rollout's agent where it is", () => {
  it("keeps the target applying when one roles change swaps it to another role that runs the agent", async () => {
    const { fleet, hosts } = await plannedFleet(1);
    await setRole(fleet, "core", [AGENT, "metrics"]);
    const r = await startRollout({ fleet, concurrency: 1 });
    const [host] = hosts;
    expect((await targets(r.id))[0]).toMatchObject({ state: "applying", generation: 2 });
    // One plan takes edge's agents away and gives core's: the agent is in both, so it stays put.
    const patch = await call("PATCH", `/v1/servers/${host.id}`, { body: { roles: ["core"] } });
    expect(patch.status).toBe(200);
    expect(await desiredAgents(host.id)).toEqual([`${AGENT}=${NEW}`, "metrics=registry.example/metrics:1"]);
    await drain(r.id);
    expect((await targets(r.id))[0]).toMatchObject({ state: "applying", generation: 2 });
    expect((await marks(host.id))?.[AGENT]).toMatchObject({ rollout_id: r.id });
    expect((await marks(host.id))?.[AGENT]?.settled).toBeUndefined();
    await reconcileApplying(r.id, hosts);
    expect((await getRollout(r.id)).counts).toMatchObject({ done: 1, skipped: 0 });
  });

  it("lets a rollout write sent before a re-plan that drops only another agent land", async () => {
    const { fleet, hosts } = await plannedFleet(1);
    const [host] = hosts;
    const { id, release } = await heldRollout(fleet, { update_channel: false });
    await setRole(fleet, "edge", [AGENT]);
    expect(await desiredAgents(host.id)).toEqual([`${AGENT}=${OLD}`]);
    release();
    await until(async () => {
      await drain(id);
      return (await targets(id)).every((t) => t.state !== "applying" || t.generation !== null);
    });
    expect((await targets(id))[0]).toMatchObject({ state: "applying", generation: 3 });
    expect(await desiredAgents(host.id)).toEqual([`${AGENT}=${NEW}`]);
    await reconcileApplying(id, hosts);
    expect((await getRollout(id)).counts).toMatchObject({ done: 1, skipped: 0 });
  });
});

describe("the planner's marks and the rollouts that come after them", () => {
  it("answers a paused rollout's later write to a server the planner gave the agent back already_at_image", async () => {
    const { fleet, hosts } = await plannedFleet(2);
    const r = await startRollout({ fleet, concurrency: 1 });
    const [first] = await targets(r.id, "?state=applying");
    expect((await call("POST", `/v1/rollouts/${r.id}/pause`)).status).toBe(200);
    // While paused, the queued server loses the agent and gets it back from the rollout's channel.
    const queued = hosts.find((h) => h.id !== first.server_id)!;
    expect((await call("PATCH", `/v1/servers/${queued.id}`, { body: { roles: [] } })).status).toBe(200);
    expect((await call("PATCH", `/v1/servers/${queued.id}`, { body: { roles: ["edge"] } })).status).toBe(200);
    expect(await desiredAgents(queued.id)).toContain(`${AGENT}=${NEW}`);
    expect((await marks(queued.id))?.[AGENT]).toMatchObject({ rollout_id: "", settled: true });
    await reconcileApplying(r.id, hosts);
    expect((await call("POST", `/v1/rollouts/${r.id}/resume`)).status).toBe(200);
    await drain(r.id);
    // Sent after the planner's choice: not superseded by it, and the choice already is the image.
    const t = (await targets(r.id)).find((x) => x.server_id === queued.id)!;
    expect([t.state, t.reason]).toEqual(["skipped", "already_at_image"]);
    expect((await getRollout(r.id)).state).toBe("succeeded");
  });

  it("lets the next rollout of the agent write a server the planner re-added it to", async () => {
    const { fleet, hosts } = await plannedFleet(1);
    const [host] = hosts;
    const first = await startRollout({ fleet });
    await reconcileApplying(first.id, hosts);
    expect((await getRollout(first.id)).state).toBe("succeeded");
    await setRole(fleet, "edge", ["logs"]);
    await setRole(fleet, "edge", [AGENT, "logs"]);
    expect(await desiredAgents(host.id)).toContain(`${AGENT}=${NEW}`);
    const newer = "registry.example/fw:3.0.0";
    const next = await startRollout({ fleet, image: newer, version: "3.0.0" });
    expect((await targets(next.id))[0]).toMatchObject({ state: "applying", generation: 5 });
    expect(await desiredAgents(host.id)).toContain(`${AGENT}=${newer}`);
    await reconcileApplying(next.id, hosts);
    expect((await getRollout(next.id)).counts).toMatchObject({ done: 1, skipped: 0 });
  });
});
