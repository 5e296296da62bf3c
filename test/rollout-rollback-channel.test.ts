/**
 * A rollback puts back what the rollout's move of the fleet's channel brought: servers that took
 * the rollout's image from the channel while the rollout held it (registered meanwhile, or
 * re-planned to gain the agent) are targets of the rollback pass beside those done in the forward
 * pass, and go back to the image the channel held before. A server whose agent an operator set
 * since, or whose image is not the rollout's, stays where it is.
 */
import { evictDurableObject, runDurableObjectAlarm, runInDurableObject } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import { applyControl } from "../src/rollouts/operator";
import type { RolloutParts } from "../src/rollouts/parts";
import { consoleFetch, signIn } from "./console-helpers";
import { call, createFleet, registerServer, settle } from "./helpers";
import {
  AGENT,
  drain,
  getRollout,
  hostReconcile,
  NEW,
  OLD,
  reconcileApplying,
  rolloutStub,
  startRollout,
  targets,
  type Host,
} from "./rollout-helpers";

async function put(path: string, body: unknown) {
  const res = await call("PUT", path, { body });
  if (res.status !== 200 && res.status !== 201) throw new Error(`${path}: ${res.status} ${JSON.stringify(res.json)}`);
  return res.json;
}

async function plannedServer(fleet: string, roles = ["edge"]): Promise<Host> {
  const hostname = `c-${Math.random().toString(36).slice(2, 9)}.example.com`;
  const s = await registerServer(fleet, { hostname, roles });
  const h = { id: s.id, token: s.token, hostname };
  await hostReconcile(h);
  await settle(h.id);
  return h;
}

/** A fleet whose `n` servers run AGENT at OLD from its channel, through the role `edge`. */
async function plannedFleet(n: number) {
  const { id: fleet } = await createFleet();
  await put(`/v1/fleets/${fleet}/channels/${AGENT}`, { image: OLD, version: "1.0.0" });
  await put(`/v1/fleets/${fleet}/channels/logs`, { image: "registry.example/logs:1", version: "1" });
  await put(`/v1/fleets/${fleet}/roles/edge`, { agents: [{ name: AGENT }] });
  await put(`/v1/fleets/${fleet}/roles/fw`, { agents: [{ name: AGENT }] });
  await put(`/v1/fleets/${fleet}/roles/logs`, { agents: [{ name: "logs" }] });
  const hosts: Host[] = [];
  for (let i = 0; i < n; i++) hosts.push(await plannedServer(fleet));
  return { fleet, hosts };
}

const desired = async (id: string) =>
  (await call("GET", `/v1/servers/${id}`)).json.desired.agents.find((a: any) => a.name === AGENT) as
    { image: string; version: string } | undefined;

const channel = async (fleet: string) => (await call("GET", `/v1/fleets/${fleet}/channels/${AGENT}`)).json;

/** Runs the forward pass to its end: every applying target's host reconciles. */
async function finishForward(id: string, hosts: Host[]) {
  for (let i = 0; i < 6 && (await getRollout(id)).state === "running"; i++) await reconcileApplying(id, hosts);
  expect((await getRollout(id)).state).toBe("succeeded");
}

async function rollBack(id: string) {
  const rb = await call("POST", `/v1/rollouts/${id}/rollback`);
  expect(rb.status).toBe(200);
  await drain(id);
}

async function finishRollback(id: string, hosts: Host[]) {
  for (let i = 0; i < 6 && (await getRollout(id)).state === "rolling_back"; i++) await reconcileApplying(id, hosts);
}

describe("a rollback and the servers that took the rollout's image from the channel", () => {
  it("moves a server registered during the rollout back to the channel's previous image", async () => {
    const { fleet, hosts } = await plannedFleet(2);
    const r = await startRollout({ fleet, concurrency: 2 });
    expect((await channel(fleet)).image).toBe(NEW);
    const late = await plannedServer(fleet);
    expect((await desired(late.id))?.image).toBe(NEW);
    await finishForward(r.id, hosts);

    await rollBack(r.id);
    expect((await channel(fleet)).image).toBe(OLD);
    const pass1 = await targets(r.id, "?pass=1");
    expect(pass1.map((t) => t.server_id).sort()).toEqual([...hosts.map((h) => h.id), late.id].sort());
    const lateTarget = pass1.find((t) => t.server_id === late.id)!;
    expect(lateTarget).toMatchObject({ image: OLD, via_channel: true });
    expect((await getRollout(r.id)).counts.applying + (await getRollout(r.id)).counts.queued).toBe(3);
    // The console's rollout page lists it among the rollback's targets, and says why it is one.
    const { cookie } = await signIn();
    const html = await (await consoleFetch(`/console/rollouts/${r.id}?fleet=${fleet}`, { cookie })).text();
    const table = html.slice(
      html.indexOf('id="rollout-targets"'),
      html.indexOf("</table>", html.indexOf('id="rollout-targets"')),
    );
    expect(table).toContain(`>${late.hostname}</a>`);
    expect(table).toContain("took the rollout&#39;s image from the channel");
    const log = html.slice(html.indexOf('id="rollout-events"'));
    expect(log).toContain(
      "1 server(s) that took the rollout&#39;s image from the fleet&#39;s channel join the rollback",
    );

    await finishRollback(r.id, [...hosts, late]);
    const end = await getRollout(r.id);
    expect(end.state).toBe("rolled_back");
    expect(end.counts).toMatchObject({ done: 3, skipped: 0 });
    for (const h of [...hosts, late]) expect(await desired(h.id)).toMatchObject({ image: OLD, version: "1.0.0" });
    expect((await targets(r.id, "?pass=1")).find((t) => t.server_id === late.id)).toMatchObject({
      state: "done",
      from_image: NEW,
    });
  });

  it("moves a server re-planned to gain the agent during the rollout back too", async () => {
    const { fleet, hosts } = await plannedFleet(1);
    const other = await plannedServer(fleet, ["logs"]);
    expect(await desired(other.id)).toBeUndefined();
    const r = await startRollout({ fleet });
    const patch = await call("PATCH", `/v1/servers/${other.id}`, { body: { roles: ["logs", "fw"] } });
    expect(patch.status).toBe(200);
    await settle(other.id);
    expect((await desired(other.id))?.image).toBe(NEW);
    await finishForward(r.id, hosts);
    await rollBack(r.id);
    await finishRollback(r.id, [...hosts, other]);
    expect((await getRollout(r.id)).state).toBe("rolled_back");
    expect((await desired(other.id))?.image).toBe(OLD);
  });

  it("leaves a server whose agent an operator set since, and one no longer at the rollout's image", async () => {
    const { fleet, hosts } = await plannedFleet(1);
    const r = await startRollout({ fleet });
    const [pinned, moved] = [await plannedServer(fleet), await plannedServer(fleet)];
    // The operator writes the agent explicitly (the image the channel gave it, a new generation).
    const cur = (await call("GET", `/v1/servers/${pinned.id}/desired`)).json;
    await put(`/v1/servers/${pinned.id}/desired`, {
      generation: cur.generation + 1,
      agents: [{ name: AGENT, image: NEW, version: "2.0.0" }],
    });
    const cur2 = (await call("GET", `/v1/servers/${moved.id}/desired`)).json;
    await put(`/v1/servers/${moved.id}/desired`, {
      generation: cur2.generation + 1,
      agents: [{ name: AGENT, image: "registry.example/fw:3.0.0", version: "3.0.0" }],
    });
    await settle(pinned.id);
    await settle(moved.id);
    await finishForward(r.id, hosts);
    await rollBack(r.id);
    await finishRollback(r.id, [...hosts, pinned, moved]);
    const end = await getRollout(r.id);
    expect(end.state).toBe("rolled_back");
    expect((await desired(pinned.id))?.image).toBe(NEW);
    expect((await desired(moved.id))?.image).toBe("registry.example/fw:3.0.0");
    const pass1 = await targets(r.id, "?pass=1");
    // The server moved elsewhere is not at the rollout's image in the index: not a target at all.
    expect(pass1.map((t) => t.server_id)).not.toContain(moved.id);
    expect(pass1.find((t) => t.server_id === pinned.id)).toMatchObject({ state: "skipped", reason: "set_by_operator" });
  });

  it("moves the channel's servers back to the earlier image even when someone moved the channel since", async () => {
    const { fleet, hosts } = await plannedFleet(1);
    const r = await startRollout({ fleet });
    const late = await plannedServer(fleet);
    expect((await desired(late.id))?.image).toBe(NEW);
    await put(`/v1/fleets/${fleet}/channels/${AGENT}`, { image: "registry.example/fw:3.0.0", version: "3.0.0" });
    const later = await plannedServer(fleet);
    await finishForward(r.id, hosts);
    await rollBack(r.id);
    // The operator's channel stands; the server that took the rollout's image goes back all the same.
    expect((await channel(fleet)).image).toBe("registry.example/fw:3.0.0");
    await finishRollback(r.id, [...hosts, late, later]);
    expect((await getRollout(r.id)).state).toBe("rolled_back");
    expect((await desired(late.id))?.image).toBe(OLD);
    expect((await desired(later.id))?.image).toBe("registry.example/fw:3.0.0");
    expect((await targets(r.id, "?pass=1")).map((t) => t.server_id)).not.toContain(later.id);
  });

  it("converges when the object dies after the rollback's turn, before the channel went back", async () => {
    const { fleet, hosts } = await plannedFleet(1);
    const r = await startRollout({ fleet });
    const late = await plannedServer(fleet);
    await finishForward(r.id, hosts);
    // The rollback's turn commits; nothing it enqueued is delivered before the object dies.
    await runInDurableObject(rolloutStub(r.id) as DurableObjectStub, (instance) => {
      const p = (instance as unknown as { parts: RolloutParts }).parts;
      p.store.transaction(() => applyControl(p, "rollback", "test", p.clock()));
    });
    await evictDurableObject(rolloutStub(r.id));
    // Nothing is finished while the lookup is owed: the pass is not over with only the done targets.
    expect((await call("GET", `/v1/rollouts/${r.id}`)).json.state).toBe("rolling_back");
    for (let i = 0; i < 5; i++) await runDurableObjectAlarm(rolloutStub(r.id));
    await drain(r.id);
    expect((await channel(fleet)).image).toBe(OLD);
    expect((await targets(r.id, "?pass=1")).map((t) => t.server_id).sort()).toEqual([hosts[0].id, late.id].sort());
    await finishRollback(r.id, [...hosts, late]);
    expect((await getRollout(r.id)).state).toBe("rolled_back");
    expect((await desired(late.id))?.image).toBe(OLD);
  });

  it("a rollback with no server from the channel ends as before", async () => {
    const { fleet, hosts } = await plannedFleet(1);
    const r = await startRollout({ fleet });
    await finishForward(r.id, hosts);
    await rollBack(r.id);
    await finishRollback(r.id, hosts);
    const end = await getRollout(r.id);
    expect(end.state).toBe("rolled_back");
    expect(end.counts).toMatchObject({ done: 1 });
  });
});
