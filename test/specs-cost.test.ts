import { describe, expect, it } from "vitest";
import { call, createFleet, d1Statements, registerServer } from "./helpers";
import { apply, getSpec } from "./specs-helpers";

/**
 * The cost goal: a change of one role costs D1 at most two statements per server it
 * re-plans (the server's projection: its index row and the changed instance row). The ledger's
 * audit row for a planner-driven generation is gone: the change's own batch audits every server it
 * re-plans in one statement (src/planner/service.ts markWhere). Measured as the difference between
 * two fleets that differ only in how many servers have the role, so the apply's constant part
 * (its read, its batch, the planner's mark deletion) cancels out.
 */
async function fleetWithEdges(edges: number) {
  const { id: fleet } = await createFleet();
  for (const [agent, image] of [
    ["base", "base:1"],
    ["fw", "fw:1"],
  ]) {
    expect((await call("PUT", `/v1/fleets/${fleet}/channels/${agent}`, { body: { image, version: "1" } })).status).toBe(
      200,
    );
  }
  expect((await call("PUT", `/v1/fleets/${fleet}/roles/edge`, { body: { agents: [{ name: "base" }] } })).status).toBe(
    200,
  );
  expect(
    (await call("PUT", `/v1/fleets/${fleet}/roles/compute`, { body: { agents: [{ name: "base" }] } })).status,
  ).toBe(200);
  const ids = [];
  for (let i = 0; i < edges; i++) ids.push((await registerServer(fleet, { roles: ["edge"] })).id);
  await registerServer(fleet, { roles: ["compute"] });
  return { fleet, edges: ids };
}

async function writesOf(change: () => Promise<{ status: number; json: any }>, replanned: number) {
  const before = await d1Statements();
  const res = await change();
  expect(res.status).toBe(200);
  expect(res.json.planning).toMatchObject({ servers: replanned, issued: replanned, remaining: false });
  return (await d1Statements()).writes - before.writes;
}

const SMALL = 2;
const LARGE = 8;
const withFw = { agents: [{ name: "base" }, { name: "fw" }] };

describe("the D1 cost of a one-role change", () => {
  it("a spec apply that changes one role writes at most two D1 statements per re-planned server", async () => {
    const perFleet = [];
    for (const n of [SMALL, LARGE]) {
      const { fleet } = await fleetWithEdges(n);
      const { spec, etag } = await getSpec(fleet);
      spec.roles.edge = withFw;
      perFleet.push(await writesOf(() => apply(fleet, spec, { ifMatch: etag }), n));
    }
    expect((perFleet[1] - perFleet[0]) / (LARGE - SMALL)).toBeLessThanOrEqual(2);
  });

  it("a role change through the API writes at most two D1 statements per re-planned server", async () => {
    const perFleet = [];
    for (const n of [SMALL, LARGE]) {
      const { fleet } = await fleetWithEdges(n);
      perFleet.push(await writesOf(() => call("PUT", `/v1/fleets/${fleet}/roles/edge`, { body: withFw }), n));
    }
    expect((perFleet[1] - perFleet[0]) / (LARGE - SMALL)).toBeLessThanOrEqual(2);
  });

  it("each re-planned server keeps an audit row naming the change and the revision that re-planned it", async () => {
    const { fleet, edges } = await fleetWithEdges(2);
    const { spec, etag } = await getSpec(fleet);
    spec.roles.edge = withFw;
    expect((await apply(fleet, spec, { ifMatch: etag })).status).toBe(200);
    for (const id of edges) {
      const items = (await call("GET", `/v1/audit?target=server:${id}`)).json.items as {
        action: string;
        actor: string;
        details: any;
      }[];
      const replan = items.find((a) => a.action === "server.replan");
      expect(replan).toMatchObject({ details: { cause: "fleet.spec.apply", fleet } });
      expect(replan!.details.rev).toBeGreaterThan(0);
      // The generation itself is the ledger's: its desired config shows the new agents.
      const desired = (await call("GET", `/v1/servers/${id}/desired`)).json;
      expect(desired).toMatchObject({ generation: 2 });
    }
  });
});

describe("a spec's servers section", () => {
  /** D1 writes of an apply labelling `n` servers by hostname (the ledgers' projections included), and of its equal repeat. */
  async function labelWrites(n: number) {
    const { id: fleet } = await createFleet();
    const hostnames: string[] = [];
    for (let i = 0; i < n; i++) {
      const hostname = `lab-${i}-${Math.random().toString(36).slice(2, 7)}.example.com`;
      await registerServer(fleet, { hostname });
      hostnames.push(hostname);
    }
    const spec = {
      apiVersion: "harbormaster/v1",
      kind: "FleetSpec",
      fleet,
      servers: Object.fromEntries(hostnames.map((h) => [h, { labels: { zone: "eu-1a" } }])),
    };
    const before = await d1Statements();
    expect((await apply(fleet, spec)).status).toBe(200);
    const first = (await d1Statements()).writes - before.writes;
    const again = await d1Statements();
    const repeat = await apply(fleet, spec);
    expect(repeat.json.changed).toBe(false);
    return { first, repeat: (await d1Statements()).writes - again.writes };
  }

  it("costs D1 a few writes per labelled server, and an equal apply writes nothing", async () => {
    const small = await labelWrites(2);
    const large = await labelWrites(6);
    const perServer = (large.first - small.first) / 4;
    console.log(`servers section: ${perServer} D1 writes per labelled server (2: ${small.first}, 6: ${large.first})`);
    // What PATCH of its labels costs (the ledger's audit row, its projection: its row, its label
    // index deleted and written), and its declaration row.
    expect(perServer).toBeLessThanOrEqual(5);
    expect(small.repeat).toBe(0);
    expect(large.repeat).toBe(0);
  });
});
