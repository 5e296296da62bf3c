import { env } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import { MAX_SERVER_LABELS, MAX_SPEC_SERVERS } from "../src/domain/limits";
import { call, createFleet, registerServer } from "./helpers";
import { apply, diff, getSpec } from "./specs-helpers";

const specWith = (fleet: string, servers: Record<string, unknown>) => ({
  apiVersion: "harbormaster/v1",
  kind: "FleetSpec",
  fleet,
  servers,
});

const labelsOf = async (id: string) => (await call("GET", `/v1/servers/${id}`)).json.labels as Record<string, string>;

async function fleetWithServers() {
  const { id: fleet } = await createFleet();
  const web = await registerServer(fleet, { hostname: "web-1.example.com", labels: { rack: "r1", tier: "web" } });
  const db = await registerServer(fleet, { hostname: "db-1.example.com", labels: { rack: "r2" } });
  return { fleet, web, db };
}

describe("a fleet spec's servers section", () => {
  it("merges labels into the named servers through their ledgers, as PATCH does, and leaves the others alone", async () => {
    const { fleet, web, db } = await fleetWithServers();
    const spec = specWith(fleet, { "web-1.example.com": { labels: { zone: "eu-1a", tier: null } } });
    const d = await diff(fleet, spec);
    expect(d.status).toBe(200);
    expect(d.json.items).toEqual([
      {
        section: "servers",
        name: "web-1.example.com",
        path: "servers.web-1.example.com",
        op: "add",
        before: { labels: { rack: "r1", tier: "web" } },
        after: { labels: { rack: "r1", zone: "eu-1a" } },
      },
    ]);
    const applied = await apply(fleet, spec);
    expect(applied.status, JSON.stringify(applied.json)).toBe(200);
    expect(applied.json).toMatchObject({ changed: true, coordinator: { pending: false } });
    expect(await labelsOf(web.id)).toEqual({ rack: "r1", zone: "eu-1a" });
    expect(await labelsOf(db.id)).toEqual({ rack: "r2" });
    // The label filter reads the same index PATCH keeps.
    const listed = await call("GET", `/v1/servers?fleet=${fleet}&label=zone=eu-1a`);
    expect(listed.json.items.map((s: { id: string }) => s.id)).toEqual([web.id]);
    expect((await getSpec(fleet)).spec.servers).toEqual({
      "web-1.example.com": { labels: { tier: null, zone: "eu-1a" } },
    });
    expect((await diff(fleet, spec)).json.equal).toBe(true);
  });

  it("shows a label changed by hand since as a change, and the apply puts it back", async () => {
    const { fleet, web } = await fleetWithServers();
    const spec = specWith(fleet, { "web-1.example.com": { labels: { zone: "eu-1a" } } });
    expect((await apply(fleet, spec)).status).toBe(200);
    expect((await call("PATCH", `/v1/servers/${web.id}`, { body: { labels: { zone: "eu-1b" } } })).status).toBe(200);
    const d = await diff(fleet, spec);
    expect(d.json.items).toEqual([
      expect.objectContaining({
        op: "change",
        before: { labels: { rack: "r1", tier: "web", zone: "eu-1b" } },
        after: { labels: { rack: "r1", tier: "web", zone: "eu-1a" } },
      }),
    ]);
    expect((await apply(fleet, spec)).json.changed).toBe(true);
    expect((await labelsOf(web.id)).zone).toBe("eu-1a");
  });

  it("keeps the labels of a hostname no server has yet, and a server registered under it starts with them", async () => {
    const { fleet } = await fleetWithServers();
    const spec = specWith(fleet, { "web-9.example.com": { labels: { zone: "eu-1c" } } });
    const d = await diff(fleet, spec);
    expect(d.json.items).toEqual([
      expect.objectContaining({
        op: "add",
        before: null,
        after: { labels: { zone: "eu-1c" } },
        note: expect.stringContaining("pending"),
      }),
    ]);
    expect((await apply(fleet, spec)).json.changed).toBe(true);
    expect((await diff(fleet, spec)).json.equal).toBe(true);
    const late = await registerServer(fleet, { hostname: "web-9.example.com", labels: { rack: "r9", zone: "x" } });
    expect(await labelsOf(late.id)).toEqual({ rack: "r9", zone: "eu-1c" });
    expect((await diff(fleet, spec)).json.equal).toBe(true);
  });

  it("refuses bad labels and too many with their paths, and writes nothing", async () => {
    const { fleet, web } = await fleetWithServers();
    const { etag } = await getSpec(fleet);
    const bad = await apply(
      fleet,
      specWith(fleet, {
        "web-1.example.com": { labels: { Zone: "eu-1a" } },
        "db-1.example.com": { labels: { zone: "-bad-" } },
        NOT_A_HOST: { labels: {} },
      }),
    );
    expect(bad.status).toBe(422);
    expect(bad.json.error.code).toBe("invalid_spec");
    const paths = bad.json.error.details.problems.map((p: { path: string }) => p.path);
    expect(paths).toEqual(
      expect.arrayContaining(["servers.web-1.example.com.labels.Zone", "servers.db-1.example.com.labels.zone"]),
    );
    expect(paths.some((p: string) => p.startsWith("servers.NOT_A_HOST"))).toBe(true);

    const many = Object.fromEntries(Array.from({ length: MAX_SERVER_LABELS - 1 }, (_, i) => [`k${i}`, "v"]));
    const tooMany = await apply(fleet, specWith(fleet, { "web-1.example.com": { labels: many } }));
    expect(tooMany.status).toBe(422);
    expect(tooMany.json.error.details.problems).toEqual([
      { path: "servers.web-1.example.com.labels", message: expect.stringContaining(`at most ${MAX_SERVER_LABELS}`) },
    ]);
    expect((await getSpec(fleet)).etag).toBe(etag);
    expect(await labelsOf(web.id)).toEqual({ rack: "r1", tier: "web" });
  });

  it("with prune, stops declaring a hostname the spec leaves out; its server keeps its labels", async () => {
    const { fleet, web } = await fleetWithServers();
    expect((await apply(fleet, specWith(fleet, { "web-1.example.com": { labels: { zone: "eu-1a" } } }))).status).toBe(
      200,
    );
    const left = specWith(fleet, {});
    expect((await diff(fleet, left)).json.items).toEqual([expect.objectContaining({ op: "unlisted" })]);
    const pruned = await call("PUT", `/v1/fleets/${fleet}/spec?prune=true`, { body: left });
    expect(pruned.status).toBe(200);
    expect(pruned.json.items).toEqual([expect.objectContaining({ op: "remove", path: "servers.web-1.example.com" })]);
    expect((await getSpec(fleet)).spec.servers).toEqual({});
    expect((await labelsOf(web.id)).zone).toBe("eu-1a");
  });
  it("prunes as many declared hostnames as a spec may name in one apply (more than D1 binds parameters)", async () => {
    const { id: fleet } = await createFleet();
    const many = Object.fromEntries(
      Array.from({ length: MAX_SPEC_SERVERS }, (_, i) => [`host-${i}.example.com`, { labels: { zone: "eu-1a" } }]),
    );
    expect((await apply(fleet, specWith(fleet, many))).status).toBe(200);
    expect(Object.keys((await getSpec(fleet)).spec.servers)).toHaveLength(MAX_SPEC_SERVERS);
    const pruned = await call("PUT", `/v1/fleets/${fleet}/spec?prune=true`, { body: specWith(fleet, {}) });
    expect(pruned.status, JSON.stringify(pruned.json)).toBe(200);
    expect((await getSpec(fleet)).spec.servers).toEqual({});
  });
  it("forgets a deleted fleet's declarations: a fleet made again under its name declares nothing", async () => {
    const { id: fleet } = await createFleet();
    const spec = specWith(fleet, { "later-1.example.com": { labels: { zone: "eu-1a" } } });
    expect((await apply(fleet, spec)).status).toBe(200);
    const rows = () =>
      env.DB.prepare("SELECT hostname FROM spec_server_labels WHERE fleet_id = ?")
        .bind(fleet)
        .all()
        .then((r) => r.results);
    expect(await rows()).toEqual([{ hostname: "later-1.example.com" }]);
    expect((await call("DELETE", `/v1/fleets/${fleet}`)).status).toBe(204);
    expect(await rows()).toEqual([]);
    // A server enrolled under the hostname in the new fleet starts with its own labels only.
    expect((await call("POST", "/v1/fleets", { body: { id: fleet } })).status).toBe(201);
    expect((await getSpec(fleet)).spec.servers).toEqual({});
    const later = await registerServer(fleet, { hostname: "later-1.example.com", labels: { rack: "r9" } });
    expect(await labelsOf(later.id)).toEqual({ rack: "r9" });
  });
});
