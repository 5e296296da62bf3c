import { runInDurableObject } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import { call } from "./helpers";
import { auditOf, clone, diff, fleetWithIntent, getSpec } from "./specs-helpers";
import { coordinator } from "./support/objects";

const newName = (what: string) => `${what}-${Date.now().toString(36)}-${Math.floor(Math.random() * 1e6)}`;
const put = (fleet: string, spec: unknown, headers: Record<string, string>) =>
  call("PUT", `/v1/fleets/${fleet}/spec`, { body: spec, headers });

describe("a spec for a fleet that does not exist", () => {
  it("is diffed against an empty fleet: exists false, never equal, no ETag", async () => {
    const fleet = newName("new");
    const d = await diff(fleet, {
      apiVersion: "harbormaster/v1",
      kind: "FleetSpec",
      fleet,
      capabilities: { gpu: true },
    });
    expect(d.status).toBe(200);
    expect(d.json).toMatchObject({ exists: false, equal: false, etag: null, summary: { add: 1 } });
    expect(d.headers.get("ETag")).toBeNull();
    // An empty spec still differs: applying it creates the fleet.
    expect((await diff(fleet, { apiVersion: "harbormaster/v1", kind: "FleetSpec", fleet })).json).toMatchObject({
      exists: false,
      equal: false,
    });
    expect((await call("GET", `/v1/fleets/${fleet}`)).status).toBe(404);
  });

  it("is diffed without creating the coordinator of a fleet that does not exist: a read token may name any fleet", async () => {
    const fleet = newName("absent-diff");
    const spec = { apiVersion: "harbormaster/v1", kind: "FleetSpec", fleet, reboot_groups: { default: { slots: 2 } } };
    const reader = (await call("POST", "/v1/tokens", { body: { name: "reader", scope: "read" } })).json.token;
    const d = await call("POST", `/v1/fleets/${fleet}/spec:diff`, { body: spec, token: reader });
    expect(d.status).toBe(200);
    expect(d.json).toMatchObject({ exists: false, summary: { add: 1 } });
    // Nothing was stored in the coordinator the name would have (not even its settings).
    expect(
      await runInDurableObject(coordinator(fleet), (_i, state) => [...state.storage.kv.list()].map(([k]) => k)),
    ).toEqual([]);
  });

  it("creates the fleet with every section (201), audited as a creation and an apply; the same PUT again is 200 and changes nothing", async () => {
    const { fleet: source } = await fleetWithIntent();
    const { spec } = await getSpec(source);
    const fleet = newName("copy");
    const res = await put(fleet, { ...clone(spec), fleet }, {});
    expect(res.status).toBe(201);
    expect(res.json).toMatchObject({ created: true, changed: true, exists: false });
    const created = await getSpec(fleet);
    // Exported from one fleet, applied under another name: the same spec.
    expect(created.spec).toEqual({ ...spec, fleet });
    expect(res.headers.get("ETag")).toBe(created.etag);
    expect((await auditOf(fleet)).map((a) => a.action).sort()).toEqual(["fleet.create", "fleet.spec.apply"]);
    const again = await put(fleet, created.spec, { "If-Match": created.etag });
    expect(again.status).toBe(200);
    expect(again.json).toMatchObject({ created: false, changed: false, equal: true, exists: true });
  });

  it("is not created under If-Match (not even *): 412, and the fleet still does not exist", async () => {
    for (const tag of ['"0123456789abcdef0123456789abcdef"', "*"]) {
      const fleet = newName("absent");
      const res = await put(fleet, { apiVersion: "harbormaster/v1", kind: "FleetSpec", fleet }, { "If-Match": tag });
      expect(res.status).toBe(412);
      expect(res.json.error).toMatchObject({ code: "precondition_failed", details: { etag: null } });
      expect((await call("GET", `/v1/fleets/${fleet}`)).status).toBe(404);
    }
  });

  it("If-None-Match: * creates it once; on a fleet that exists it is 412 and changes nothing", async () => {
    const fleet = newName("once");
    const spec = { apiVersion: "harbormaster/v1", kind: "FleetSpec", fleet, capabilities: { gpu: true } };
    expect((await put(fleet, spec, { "If-None-Match": "*" })).status).toBe(201);
    const { etag } = await getSpec(fleet);
    const second = await put(fleet, { ...spec, capabilities: { gpu: false } }, { "If-None-Match": "*" });
    expect(second.status).toBe(412);
    expect(second.json.error.details).toEqual({ etag });
    expect((await getSpec(fleet)).spec.capabilities).toEqual({ gpu: true });
  });

  it("a spec refused for its problems creates nothing", async () => {
    const fleet = newName("bad");
    const res = await put(
      fleet,
      { apiVersion: "harbormaster/v1", kind: "FleetSpec", fleet, roles: { edge: { agents: [{ name: "nochannel" }] } } },
      {},
    );
    expect(res.status).toBe(422);
    expect((await call("GET", `/v1/fleets/${fleet}`)).status).toBe(404);
  });
});
