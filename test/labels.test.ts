/**
 * Server labels: set at registration, merged by PATCH, kept by the server's ledger and projected
 * to the index (a labels column and the server_labels rows the `label=` filters read), and taken
 * by rollout selectors. Bad labels are refused with their path and change nothing.
 */
import { env } from "cloudflare:test";
import { eq } from "drizzle-orm";
import { describe, expect, it } from "vitest";
import { getDb } from "../src/db/client";
import { serverLabels, servers } from "../src/db/schema";
import { MAX_SERVER_LABELS } from "../src/domain/limits";
import { buildProjection } from "../src/ledger/projection";
import type { ServerRecord } from "../src/model/server/record";
import { listServers, sparseLabel } from "../src/servers/store";
import {
  breakD1,
  call,
  createFleet,
  d1Statements,
  fireTimersNow,
  pendingEffects,
  registerServer,
  uniq,
} from "./helpers";
import { AGENT, fleetWithAgent, NEW, startRollout, targets } from "./rollout-helpers";

const db = () => getDb(env.DB);
const ledger = (id: string) => env.LEDGER.get(env.LEDGER.idFromName(id));
const labelRows = async (id: string) =>
  (await db().select().from(serverLabels).where(eq(serverLabels.serverId, id)))
    .map((r) => `${r.key}=${r.value}`)
    .sort();
const indexLabels = async (id: string) =>
  (await db().select({ labels: servers.labels }).from(servers).where(eq(servers.id, id)))[0]?.labels;
const manyLabels = (n: number, prefix = "k") =>
  Object.fromEntries(Array.from({ length: n }, (_, i) => [`${prefix}${i}`, `v${i}`]));

describe("labels at registration", () => {
  it("are kept by the ledger, shown by GET and the list, and written to the label index", async () => {
    const { id: fleet } = await createFleet();
    const s = await registerServer(fleet, { labels: { zone: "eu-1a", rack: "r12", "example.com/tier": "gold" } });
    expect((s as unknown as { labels: unknown }).labels).toEqual({
      "example.com/tier": "gold",
      rack: "r12",
      zone: "eu-1a",
    });
    const got = await call("GET", `/v1/servers/${s.id}`);
    expect(got.json.labels).toEqual({ "example.com/tier": "gold", rack: "r12", zone: "eu-1a" });
    const list = await call("GET", `/v1/servers?fleet=${fleet}`);
    expect(list.json.items[0].labels).toEqual({ "example.com/tier": "gold", rack: "r12", zone: "eu-1a" });
    expect(await labelRows(s.id)).toEqual(["example.com/tier=gold", "rack=r12", "zone=eu-1a"]);
  });

  it("default to none", async () => {
    const { id: fleet } = await createFleet();
    const s = await registerServer(fleet);
    expect((await call("GET", `/v1/servers/${s.id}`)).json.labels).toEqual({});
    expect(await indexLabels(s.id)).toEqual({});
    expect(await labelRows(s.id)).toEqual([]);
  });

  it.each([
    ["too many", manyLabels(MAX_SERVER_LABELS + 1), "labels"],
    ["an uppercase key", { Zone: "eu-1a" }, "labels.Zone"],
    ["a key ending in a dash", { "zone-": "eu-1a" }, "labels.zone-"],
    ["a key of 64 characters", { ["k".repeat(64)]: "x" }, `labels.${"k".repeat(64)}`],
    ["a value with a space", { zone: "eu 1a" }, "labels.zone"],
    ["an empty value", { zone: "" }, "labels.zone"],
    ["a value of 64 characters", { zone: "v".repeat(64) }, "labels.zone"],
    ["a number for a value", { zone: 1 }, "labels.zone"],
    ["a list", ["zone=eu-1a"], "labels"],
    // An own `__proto__` key, as JSON.parse makes it (zod alone would drop it without a word).
    ["a __proto__ key", JSON.parse('{"__proto__": "x", "zone": "eu-1a"}'), "labels.__proto__"],
  ])("refuses %s with its path, and registers nothing", async (_what, labels, path) => {
    const { id: fleet } = await createFleet();
    const hostname = `${uniq("bad")}.example.com`;
    const res = await call("POST", "/v1/servers", { body: { fleet, hostname, labels } });
    expect(res.status).toBe(400);
    expect(res.json.error.code).toBe("validation_failed");
    expect(res.json.error.details.map((d: { path: string }) => d.path)).toContain(path);
    expect((await call("GET", `/v1/servers?fleet=${fleet}`)).json.items).toEqual([]);
  });

  it(`takes exactly ${MAX_SERVER_LABELS}`, async () => {
    const { id: fleet } = await createFleet();
    const s = await registerServer(fleet, { labels: manyLabels(MAX_SERVER_LABELS) });
    expect(await labelRows(s.id)).toHaveLength(MAX_SERVER_LABELS);
  });
});

describe("PATCH labels", () => {
  it("merges: named keys are set, null removes a key, the others are kept", async () => {
    const { id: fleet } = await createFleet();
    const s = await registerServer(fleet, { labels: { zone: "eu-1a", rack: "r12", tier: "gold" } });
    const res = await call("PATCH", `/v1/servers/${s.id}`, {
      body: { labels: { zone: "eu-1b", rack: null, os: "fcos" } },
    });
    expect(res.status).toBe(200);
    expect(res.json.labels).toEqual({ os: "fcos", tier: "gold", zone: "eu-1b" });
    expect(await indexLabels(s.id)).toEqual({ os: "fcos", tier: "gold", zone: "eu-1b" });
    expect(await labelRows(s.id)).toEqual(["os=fcos", "tier=gold", "zone=eu-1b"]);
    const audit = await call("GET", `/v1/audit?target=server:${s.id}`);
    expect(audit.json.items.map((a: { action: string }) => a.action)).toContain("server.labels");
  });

  it("removing every label empties the index's rows", async () => {
    const { id: fleet } = await createFleet();
    const s = await registerServer(fleet, { labels: { zone: "eu-1a" } });
    await call("PATCH", `/v1/servers/${s.id}`, { body: { labels: { zone: null } } });
    expect(await indexLabels(s.id)).toEqual({});
    expect(await labelRows(s.id)).toEqual([]);
  });

  it("that changes nothing writes nothing to D1", async () => {
    const { id: fleet } = await createFleet();
    const s = await registerServer(fleet, { labels: { zone: "eu-1a" } });
    const before = await d1Statements();
    const res = await call("PATCH", `/v1/servers/${s.id}`, { body: { labels: { zone: "eu-1a", gone: null } } });
    expect(res.status).toBe(200);
    expect((await d1Statements()).writes).toBe(before.writes);
    expect(await pendingEffects(ledger(s.id))).toBe(0);
  });

  it("with labels only leaves the roles, reboot group and plan alone", async () => {
    const { id: fleet } = await createFleet();
    const s = await registerServer(fleet, { roles: ["web"], reboot_group: "g1" });
    const res = await call("PATCH", `/v1/servers/${s.id}`, { body: { labels: { zone: "eu-1a" } } });
    expect(res.json).toMatchObject({
      roles: ["web"],
      reboot_group: "g1",
      labels: { zone: "eu-1a" },
      desired_generation: 1,
    });
  });

  it(`refuses a merge that would exceed ${MAX_SERVER_LABELS} labels, and changes nothing (the roles sent with it included)`, async () => {
    const { id: fleet } = await createFleet();
    const s = await registerServer(fleet, { labels: manyLabels(MAX_SERVER_LABELS - 1), roles: ["web"] });
    const res = await call("PATCH", `/v1/servers/${s.id}`, {
      body: { labels: { extra1: "a", extra2: "b" }, roles: ["db"] },
    });
    expect(res.status).toBe(400);
    expect(res.json.error.code).toBe("validation_failed");
    expect(res.json.error.details).toEqual([expect.objectContaining({ path: "labels" })]);
    const got = (await call("GET", `/v1/servers/${s.id}`)).json;
    expect(got.labels).toEqual(manyLabels(MAX_SERVER_LABELS - 1));
    expect(got.roles).toEqual(["web"]);
    expect(await labelRows(s.id)).toHaveLength(MAX_SERVER_LABELS - 1);
    // Replacing one (removing one as it adds one) stays within the limit.
    const swap = await call("PATCH", `/v1/servers/${s.id}`, {
      body: { labels: { k0: null, extra1: "a", extra2: "b" } },
    });
    expect(swap.status).toBe(200);
    expect(Object.keys(swap.json.labels)).toHaveLength(MAX_SERVER_LABELS);
  });

  it("refused for a taken fleetlock_id sent with it, changes no label", async () => {
    const { id: fleet } = await createFleet();
    await registerServer(fleet, { fleetlock_id: "taken-1" });
    const s = await registerServer(fleet, { labels: { zone: "eu-1a" } });
    const res = await call("PATCH", `/v1/servers/${s.id}`, {
      body: { labels: { zone: "eu-1b", rack: "r1" }, fleetlock_id: "taken-1" },
    });
    expect(res.status).toBe(409);
    expect(res.json.error.code).toBe("fleetlock_id_taken");
    const got = (await call("GET", `/v1/servers/${s.id}`)).json;
    expect(got.labels).toEqual({ zone: "eu-1a" });
    expect(got.fleetlock_id).toBeNull();
    expect(await labelRows(s.id)).toEqual(["zone=eu-1a"]);
  });

  it(`refused for exceeding ${MAX_SERVER_LABELS} labels, changes no reboot group sent with it`, async () => {
    const { id: fleet } = await createFleet();
    const s = await registerServer(fleet, { labels: manyLabels(MAX_SERVER_LABELS) });
    const res = await call("PATCH", `/v1/servers/${s.id}`, { body: { labels: { extra: "a" }, reboot_group: "other" } });
    expect(res.status).toBe(400);
    expect(res.json.error.details).toEqual([expect.objectContaining({ path: "labels" })]);
    const got = (await call("GET", `/v1/servers/${s.id}`)).json;
    expect(got.reboot_group).toBe("default");
    expect(got.labels).toEqual(manyLabels(MAX_SERVER_LABELS));
  });

  it("refuses a bad key or value with its path before anything changes", async () => {
    const { id: fleet } = await createFleet();
    const s = await registerServer(fleet, { labels: { zone: "eu-1a" } });
    const res = await call("PATCH", `/v1/servers/${s.id}`, { body: { labels: { zone: "eu-1b", "Bad Key": "x" } } });
    expect(res.status).toBe(400);
    expect(res.json.error.details.map((d: { path: string }) => d.path)).toContain("labels.Bad Key");
    expect((await call("GET", `/v1/servers/${s.id}`)).json.labels).toEqual({ zone: "eu-1a" });
  });
});

describe("the projection's signature", () => {
  const record = (labels?: Record<string, string>): ServerRecord => ({
    id: crypto.randomUUID(),
    fleet_id: "f",
    hostname: "h.example.com",
    kind: "managed",
    roles: [],
    reboot_group: "default",
    fleetlock_id: null,
    state: "active",
    stale_after_s: 600,
    created_at: 0,
    token_hash: "",
    token_id: "",
    ...(labels ? { labels } : {}),
  });
  const signed = (r: ServerRecord) =>
    JSON.parse(
      buildProjection(r, { generation: 1, agents: [], lifecycle: "run", updated_at: 0 }, undefined, 0).signatures
        .server,
    );

  it("of a server without labels is the one written before servers had labels, so its row is not rewritten for them", () => {
    expect(signed(record())).not.toHaveProperty("labels");
    expect(signed(record({}))).not.toHaveProperty("labels");
    expect(signed(record({ zone: "eu-1a" })).labels).toEqual({ zone: "eu-1a" });
  });
});

describe("the label index converges after D1 failed", () => {
  it("a PATCH whose projection failed lands later, its label rows written exactly once", async () => {
    const { id: fleet } = await createFleet();
    const s = await registerServer(fleet, { labels: { zone: "eu-1a", rack: "r1" } });
    const restore = await breakD1(ledger(s.id));
    // The ledger commits first: the PATCH is answered, its projection waits in the outbox.
    const res = await call("PATCH", `/v1/servers/${s.id}`, { body: { labels: { zone: "eu-1b", rack: null } } });
    expect(res.status).toBe(200);
    expect(await labelRows(s.id)).toEqual(["rack=r1", "zone=eu-1a"]);
    expect(await pendingEffects(ledger(s.id))).toBeGreaterThan(0);
    await restore();
    await fireTimersNow(ledger(s.id));
    expect(await pendingEffects(ledger(s.id))).toBe(0);
    expect(await labelRows(s.id)).toEqual(["zone=eu-1b"]);
    expect(await indexLabels(s.id)).toEqual({ zone: "eu-1b" });
    // Projected once: a later alarm finds nothing owed and writes nothing.
    const before = await d1Statements();
    await fireTimersNow(ledger(s.id));
    expect((await d1Statements()).writes).toBe(before.writes);
    expect(await labelRows(s.id)).toEqual(["zone=eu-1b"]);
  });
});

describe("filtering by label", () => {
  async function zonedFleet() {
    const { id: fleet } = await createFleet();
    const mk = (name: string, labels: Record<string, string>) =>
      registerServer(fleet, { hostname: `${name}.example.com`, labels });
    const a = await mk("a", { zone: "eu-1a", rack: "r1" });
    const b = await mk("b", { zone: "eu-1a", rack: "r2" });
    const c = await mk("c", { zone: "eu-1b", rack: "r1" });
    const d = await mk("d", {});
    return { fleet, a, b, c, d };
  }
  const hostnames = (res: { json: { items: { hostname: string }[] } }) =>
    res.json.items.map((i) => i.hostname.split(".")[0]);

  it("GET /v1/servers: key=value, several terms ANDed, a bare key for servers that have it", async () => {
    const { fleet } = await zonedFleet();
    expect(hostnames(await call("GET", `/v1/servers?fleet=${fleet}&label=zone=eu-1a`))).toEqual(["a", "b"]);
    expect(hostnames(await call("GET", `/v1/servers?fleet=${fleet}&label=zone=eu-1a&label=rack=r1`))).toEqual(["a"]);
    expect(hostnames(await call("GET", `/v1/servers?fleet=${fleet}&label=rack`))).toEqual(["a", "b", "c"]);
    expect(hostnames(await call("GET", `/v1/servers?fleet=${fleet}&label=zone=eu-9z`))).toEqual([]);
    // Paged, the filter holds on every page.
    const first = await call("GET", `/v1/servers?fleet=${fleet}&label=rack&limit=2`);
    expect(hostnames(first)).toEqual(["a", "b"]);
    const second = await call("GET", `/v1/servers?fleet=${fleet}&label=rack&limit=2&cursor=${first.json.next_cursor}`);
    expect(hostnames(second)).toEqual(["c"]);
  });

  it("GET /v1/servers across fleets filters by label too", async () => {
    const { fleet, a } = await zonedFleet();
    const zone = uniq("z");
    await call("PATCH", `/v1/servers/${a.id}`, { body: { labels: { zone } } });
    const res = await call("GET", `/v1/servers?label=zone=${zone}`);
    expect(res.json.items.map((i: { id: string; fleet: string }) => [i.id, i.fleet])).toEqual([[a.id, fleet]]);
  });

  it("follows a PATCH: a server leaves the old value's list and joins the new one", async () => {
    const { fleet, a } = await zonedFleet();
    await call("PATCH", `/v1/servers/${a.id}`, { body: { labels: { zone: "eu-1b" } } });
    expect(hostnames(await call("GET", `/v1/servers?fleet=${fleet}&label=zone=eu-1a`))).toEqual(["b"]);
    expect(hostnames(await call("GET", `/v1/servers?fleet=${fleet}&label=zone=eu-1b`))).toEqual(["a", "c"]);
  });

  it.each([["Zone=eu-1a"], ["zone=eu 1a"], ["zone="], ["=eu-1a"]])(
    "refuses label=%s as invalid_query",
    async (term) => {
      const res = await call("GET", `/v1/servers?label=${encodeURIComponent(term)}`);
      expect(res.status).toBe(400);
      expect(res.json.error.code).toBe("invalid_query");
      expect(res.json.error.details[0].path).toMatch(/^label/);
    },
  );

  it("refuses more than 16 terms", async () => {
    const q = Array.from({ length: 17 }, (_, i) => `label=k${i}`).join("&");
    const res = await call("GET", `/v1/servers?${q}`);
    expect(res.status).toBe(400);
    expect(res.json.error.code).toBe("invalid_query");
    // Saying why, not zod's bare "Invalid input" for a union neither branch took.
    expect(res.json.error.message).toContain("at most 16 label terms");
    expect(res.json.error.details).toEqual([{ path: "label", message: "at most 16 label terms" }]);
  });

  it("GET /v1/instances filters by the server's labels", async () => {
    const { fleet, hosts } = await fleetWithAgent(3, {
      server: (i) => ({ labels: { zone: i < 2 ? "eu-1a" : "eu-1b" } }),
    });
    const res = await call("GET", `/v1/instances?agent=${AGENT}&label=zone=eu-1a`);
    const mine = res.json.items.filter((i: { fleet: string }) => i.fleet === fleet);
    expect(mine.map((i: { server_id: string }) => i.server_id).sort()).toEqual([hosts[0].id, hosts[1].id].sort());
    const byKey = await call("GET", `/v1/instances?server=${hosts[2].id}&label=zone`);
    expect(byKey.json.items.map((i: { agent: string }) => i.agent).sort()).toEqual(["fw-agent", "logs"]);
    const none = await call("GET", `/v1/instances?server=${hosts[2].id}&label=zone=eu-1a`);
    expect(none.json.items).toEqual([]);
  });

  it("reads the servers with the label, not the fleet, at 10,000 servers", async () => {
    const { id: fleet } = await createFleet();
    const now = Date.now();
    await env.DB.prepare(
      `INSERT INTO servers (id, fleet_id, hostname, kind, roles, labels, reboot_group, state, status, desired_generation, created_at, updated_at)
       WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 10000)
       SELECT printf('00000000-0000-4000-c000-%012d', i), ?1, 'h' || i || '.example.com', 'managed', '[]',
              CASE WHEN i % 1000 = 0 THEN '{"canary":"yes"}' ELSE '{"zone":"z' || (i % 4) || '"}' END,
              'default', 'active', 'realized', 1, ?2, ?2 FROM n`,
    )
      .bind(fleet, now)
      .run();
    await env.DB.prepare(
      `INSERT INTO server_labels (server_id, fleet_id, key, value)
       WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 10000)
       SELECT printf('00000000-0000-4000-c000-%012d', i), ?1,
              CASE WHEN i % 1000 = 0 THEN 'canary' ELSE 'zone' END,
              CASE WHEN i % 1000 = 0 THEN 'yes' ELSE 'z' || (i % 4) END FROM n`,
    )
      .bind(fleet)
      .run();
    const read = async (labels: { key: string; value?: string }[]) => {
      const driveFrom = await sparseLabel(getDb(env.DB), fleet, labels);
      const query = listServers(getDb(env.DB), { fleet, labels, driveFrom }, null, 20, now);
      const { sql, params } = query.toSQL();
      const { meta } = await env.DB.prepare(sql)
        .bind(...params)
        .all();
      return { rows: await query, rowsRead: meta.rows_read };
    };
    const canary = await read([{ key: "canary", value: "yes" }]);
    expect(canary.rows).toHaveLength(10);
    expect(canary.rows.every((r) => r.labels.canary === "yes")).toBe(true);
    // The 10 label entries and their 10 servers (a json_each over the fleet read 10,000 rows).
    expect(canary.rowsRead).toBeLessThan(100);
    console.log(`label filter, 10,000 servers: canary=yes (10 servers) read ${canary.rowsRead} rows`);
    const zone = await read([{ key: "zone", value: "z1" }]);
    expect(zone.rows).toHaveLength(21);
    expect(zone.rows.every((r) => r.labels.zone === "z1")).toBe(true);
    expect(zone.rowsRead).toBeLessThan(300);
    // Both together: driven from the rare one, the common one checked per server.
    const both = await read([{ key: "zone", value: "z0" }, { key: "canary" }]);
    expect(both.rows).toHaveLength(0);
    console.log(`label filter, 10,000 servers: zone=z1 (2,500 servers, a page of 20) read ${zone.rowsRead} rows`);
  });
});

describe("rollouts select by label", () => {
  const rollout = (body: Record<string, unknown>) =>
    call("POST", "/v1/rollouts", { body: { agent: AGENT, image: NEW, version: "2.0.0", ...body } });

  it("targets only the servers with every label of the selector", async () => {
    const { fleet, hosts } = await fleetWithAgent(4, {
      server: (i) => ({ labels: { zone: i % 2 ? "eu-1b" : "eu-1a", ...(i === 0 ? { canary: "yes" } : {}) } }),
    });
    const r = await startRollout({ fleet, selector: { labels: { zone: "eu-1a" } } });
    expect((await targets(r.id)).map((x) => x.server_id).sort()).toEqual([hosts[0].id, hosts[2].id].sort());
  });

  it("with labels and roles, both must hold", async () => {
    const { fleet, hosts } = await fleetWithAgent(3, {
      server: (i) => ({ labels: { zone: i === 2 ? "eu-1b" : "eu-1a" }, roles: i === 0 ? [] : ["web"] }),
    });
    const r = await startRollout({ fleet, selector: { labels: { zone: "eu-1a" }, roles: ["web"] } });
    expect((await targets(r.id)).map((x) => x.server_id)).toEqual([hosts[1].id]);
  });

  it("refuses labels that match no server as no_targets, and a bad selector label with its path; nothing starts", async () => {
    const { fleet } = await fleetWithAgent(1, { server: () => ({ labels: { zone: "eu-1a" } }) });
    const none = await rollout({ fleet, selector: { labels: { zone: "us-1" } } });
    expect(none.status).toBe(422);
    expect(none.json.error.code).toBe("no_targets");
    const bad = await rollout({ fleet, selector: { labels: { Zone: "x" } } });
    expect(bad.status).toBe(400);
    expect(bad.json.error.details.map((d: { path: string }) => d.path)).toContain("selector.labels.Zone");
    expect((await call("GET", `/v1/rollouts?fleet=${fleet}`)).json.items).toEqual([]);
  });
});
