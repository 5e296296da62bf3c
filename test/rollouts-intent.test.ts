/**
 * Rollouts with fleet intent (docs/operator-guide.md): the channel moves with the rollout (and back on rollback),
 * servers registered meanwhile get the new image, decommissioned servers leave the rollout.
 */
import { describe, expect, it } from "vitest";
import { call, createFleet, registerServer, settle } from "./helpers";
import {
  AGENT,
  drain,
  getRollout,
  hostReconcile,
  NEW,
  OLD,
  reconcileApplying,
  startRollout,
  targets,
  type Host,
} from "./rollout-helpers";

async function plannedFleet(n: number) {
  const { id: fleet } = await createFleet();
  expect(
    (await call("PUT", `/v1/fleets/${fleet}/channels/${AGENT}`, { body: { image: OLD, version: "1.0.0" } })).status,
  ).toBeLessThan(300);
  expect(
    (await call("PUT", `/v1/fleets/${fleet}/roles/edge`, { body: { agents: [{ name: AGENT }] } })).status,
  ).toBeLessThan(300);
  const hosts: Host[] = [];
  for (let i = 0; i < n; i++) hosts.push(await plannedServer(fleet));
  return { fleet, hosts };
}

async function plannedServer(fleet: string): Promise<Host> {
  const hostname = `p-${Math.random().toString(36).slice(2, 9)}.example.com`;
  const s = await registerServer(fleet, { hostname, roles: ["edge"] });
  const h = { id: s.id, token: s.token, hostname };
  await hostReconcile(h);
  await settle(h.id);
  return h;
}

const channel = async (fleet: string) =>
  (await call("GET", `/v1/fleets/${fleet}/channels/${AGENT}`)).json.image as string;
const desiredImage = async (id: string) =>
  (await call("GET", `/v1/servers/${id}`)).json.desired.agents.find((a: any) => a.name === AGENT)?.image as
    string | undefined;

describe("rollouts and fleet intent", () => {
  it("moves the channel at the start (new servers get the image) and back on rollback", async () => {
    const { fleet, hosts } = await plannedFleet(2);
    expect(await desiredImage(hosts[0].id)).toBe(OLD);
    const r = await startRollout({ fleet, concurrency: 1 });
    expect((await getRollout(r.id)).channel_updated).toBe(true);
    expect(await channel(fleet)).toBe(NEW);
    // Registered while the rollout runs: set up from the channel, not a target.
    const late = await plannedServer(fleet);
    expect(await desiredImage(late.id)).toBe(NEW);
    expect((await targets(r.id)).map((t) => t.server_id)).not.toContain(late.id);
    for (let i = 0; i < 4 && (await getRollout(r.id)).state === "running"; i++) await reconcileApplying(r.id, hosts);
    expect((await getRollout(r.id)).state).toBe("succeeded");
    const rb = await call("POST", `/v1/rollouts/${r.id}/rollback`);
    expect(rb.status).toBe(200);
    await drain(r.id);
    expect(await channel(fleet)).toBe(OLD);
    // The server the channel set up with the new image goes back with the targets.
    for (let i = 0; i < 4 && (await getRollout(r.id)).state === "rolling_back"; i++)
      await reconcileApplying(r.id, [...hosts, late]);
    expect((await getRollout(r.id)).state).toBe("rolled_back");
    for (const h of [...hosts, late]) expect(await desiredImage(h.id)).toBe(OLD);
    const history = await call("GET", `/v1/audit?target=fleet:${fleet}`);
    expect(
      history.json.items.filter((a: any) => a.action === "channel.put" && a.actor === `rollout:${r.id}`),
    ).toHaveLength(2);
  });

  it("update_channel false leaves the channel alone", async () => {
    const { fleet } = await plannedFleet(1);
    const r = await startRollout({ fleet, update_channel: false });
    expect((await getRollout(r.id)).channel_updated).toBe(false);
    expect(await channel(fleet)).toBe(OLD);
  });

  it("servers decommissioned during the rollout leave it: applying and queued targets become skipped (removed)", async () => {
    const { fleet, hosts } = await plannedFleet(5);
    const r = await startRollout({ fleet, concurrency: 2 });
    const [a, b] = await targets(r.id, "?state=applying");
    const queued = (await targets(r.id, "?state=queued"))[0];
    // One applying server decommissioned, one force-removed (a dead host), one queued decommissioned.
    expect((await call("POST", `/v1/servers/${a.server_id}/decommission`, { body: {} })).status).toBe(200);
    expect(
      (await call("POST", `/v1/servers/${b.server_id}/decommission`, { body: { force: true, reason: "host is dead" } }))
        .status,
    ).toBe(200);
    expect((await call("POST", `/v1/servers/${queued.server_id}/decommission`, { body: {} })).status).toBe(200);
    for (const id of [a.server_id, b.server_id, queued.server_id]) await settle(id);
    await drain(r.id);
    expect((await getRollout(r.id)).counts).toMatchObject({ skipped: 3, applying: 2, queued: 0 });
    for (let i = 0; i < 6 && (await getRollout(r.id)).state === "running"; i++) await reconcileApplying(r.id, hosts);
    const final = await getRollout(r.id);
    expect(final.state).toBe("succeeded");
    expect(final.counts).toMatchObject({ done: 2, skipped: 3 });
    const skipped = await targets(r.id, "?state=skipped");
    expect(skipped.map((t) => t.server_id).sort()).toEqual([a.server_id, b.server_id, queued.server_id].sort());
    expect(skipped.every((t) => t.reason === "removed")).toBe(true);
  });
});
