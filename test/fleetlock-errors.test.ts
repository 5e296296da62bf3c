import { createExecutionContext, env, waitOnExecutionContext } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import { createApp } from "../src/app";
import { call, registerServer } from "./helpers";
import {
  fleetWithKey,
  getGroup,
  putGroup,
  raw,
  registerClients,
  zincati,
  type FleetLockFleet,
} from "./fleetlock-helpers";

const KINDS = new Set([
  "missing_protocol_header",
  "invalid_client_params",
  "payload_too_large",
  "unauthorized",
  "unknown_client",
  "group_mismatch",
  "unknown_group",
  "semaphore_full",
  "group_paused",
  "outside_maintenance_window",
  "not_found",
  "method_not_allowed",
  "internal_error",
]);

/** Every failure: the protocol's body, both fields non-empty strings, kind from the fixed set. */
function expectFailure(res: { status: number; json: any }, status: number, kind: string) {
  expect(res.status).toBe(status);
  expect(res.json).toEqual({ kind, value: expect.any(String) });
  expect(res.json.value.length).toBeGreaterThan(0);
  expect(KINDS.has(res.json.kind)).toBe(true);
}

async function setup(overrides: Record<string, unknown> = {}) {
  const f = await fleetWithKey(overrides);
  await putGroup(f.fleet, "default", { slots: 5 });
  const [a] = await registerClients(f.fleet, 1);
  return { f, a };
}

const post = (
  f: FleetLockFleet,
  op: string,
  body: BodyInit | null,
  headers: Record<string, string> = { "fleet-lock-protocol": "true" },
) => raw(new URL(`v1/${op}`, f.baseUrl).toString(), { method: "POST", headers, body });

const nothingHeld = async (f: FleetLockFleet) => expect((await getGroup(f.fleet, "default")).holders).toEqual([]);

describe("FleetLock refusals: the right {kind,value}, and nothing changes", () => {
  it("refuses a wrong key, an unknown fleet and a malformed key with unauthorized", async () => {
    const { f, a } = await setup();
    const wrongKey = f.baseUrl.replace(f.key, "A".repeat(43));
    expectFailure(await zincati(wrongKey, "pre-reboot", a.id), 403, "unauthorized");
    expectFailure(await zincati(f.baseUrl.replace(f.key, "short"), "pre-reboot", a.id), 403, "unauthorized");
    expectFailure(
      await zincati(f.baseUrl.replace(`/${f.fleet}/`, "/no-such-fleet/"), "pre-reboot", a.id),
      403,
      "unauthorized",
    );
    expectFailure(
      await zincati(f.baseUrl.replace(`/${f.fleet}/`, "/Not_A_Fleet/"), "pre-reboot", a.id),
      403,
      "unauthorized",
    );
    await nothingHeld(f);
  });

  it("refuses every request of a fleet that has no key yet", async () => {
    const { id } = await (await import("./helpers")).createFleet();
    const res = await zincati(`https://hm.test/fleetlock/${id}/${"B".repeat(43)}/`, "pre-reboot", "x");
    expectFailure(res, 403, "unauthorized");
  });

  it("stops accepting the old key the moment the key is rotated", async () => {
    const { f, a } = await setup();
    const rotated = await call("POST", `/v1/fleets/${f.fleet}/fleetlock-key`);
    expect(rotated.status).toBe(201);
    expect(rotated.json.base_url).toBe(`https://hm.test/fleetlock/${f.fleet}/${rotated.json.key}/`);
    expectFailure(await zincati(f.baseUrl, "pre-reboot", a.id), 403, "unauthorized");
    await nothingHeld(f);
    expect((await zincati(rotated.json.base_url, "pre-reboot", a.id)).status).toBe(200);
  });

  it("only lets admins rotate the key, and 404s an unknown fleet", async () => {
    const write = await call("POST", "/v1/tokens", { body: { name: "w", scope: "write" } });
    expect(write.status).toBe(201);
    const { f } = await setup();
    expect((await call("POST", `/v1/fleets/${f.fleet}/fleetlock-key`, { token: write.json.token })).status).toBe(403);
    expect((await call("POST", "/v1/fleets/no-such-fleet/fleetlock-key")).status).toBe(404);
  });

  it("refuses a request without fleet-lock-protocol: true", async () => {
    const { f, a } = await setup();
    const body = JSON.stringify({ client_params: { id: a.id, group: "default" } });
    expectFailure(await post(f, "pre-reboot", body, {}), 400, "missing_protocol_header");
    expectFailure(
      await post(f, "pre-reboot", body, { "fleet-lock-protocol": "false" }),
      400,
      "missing_protocol_header",
    );
    expectFailure(await post(f, "steady-state", body, {}), 400, "missing_protocol_header");
    await nothingHeld(f);
  });

  it("refuses malformed bodies with invalid_client_params", async () => {
    const { f, a } = await setup();
    const bodies = [
      "",
      "not json",
      "{",
      "[]",
      "null",
      JSON.stringify({}),
      JSON.stringify({ client_params: "x" }),
      JSON.stringify({ client_params: { group: "default" } }),
      JSON.stringify({ client_params: { id: "", group: "default" } }),
      JSON.stringify({ client_params: { id: 42, group: "default" } }),
      JSON.stringify({ client_params: { id: "x".repeat(257), group: "default" } }),
      JSON.stringify({ client_params: { node_uuid: a.id, group: "default" } }),
    ];
    for (const body of bodies) {
      expectFailure(await post(f, "pre-reboot", body), 400, "invalid_client_params");
    }
    expectFailure(await post(f, "pre-reboot", new Uint8Array([0x7b, 0xff, 0xfe, 0x7d])), 400, "invalid_client_params");
    await nothingHeld(f);
  });

  it("refuses bad group names with invalid_client_params", async () => {
    const { f, a } = await setup();
    for (const group of ["", "has space", "a/b", "ünïcode", "under_score", 7, "x".repeat(64)]) {
      const body = JSON.stringify({ client_params: { id: a.id, group } });
      expectFailure(await post(f, "pre-reboot", body), 400, "invalid_client_params");
      expectFailure(await post(f, "steady-state", body), 400, "invalid_client_params");
    }
    await nothingHeld(f);
  });

  it("defaults a missing group to 'default', as Zincati does", async () => {
    const { f, a } = await setup();
    const res = await post(f, "pre-reboot", JSON.stringify({ client_params: { id: a.id } }));
    expect(res.status).toBe(200);
    expect((await getGroup(f.fleet, "default")).holders.map((h) => h.id)).toEqual([a.id]);
  });

  it("refuses a body over the FleetLock size limit with payload_too_large", async () => {
    const { f, a } = await setup();
    const body = JSON.stringify({ client_params: { id: a.id, group: "default" }, pad: "x".repeat(20_000) });
    expectFailure(await post(f, "pre-reboot", body), 413, "payload_too_large");
    await nothingHeld(f);
  });

  it("answers a wrong key with unauthorized whatever its body, and tells only the key's holders what is wrong with a body", async () => {
    const { f, a } = await setup();
    const wrong = { ...f, baseUrl: f.baseUrl.replace(f.key, "A".repeat(43)) };
    const elsewhere = { ...f, baseUrl: f.baseUrl.replace(`/${f.fleet}/`, "/no-such-fleet/") };
    const bad: [BodyInit, number, string][] = [
      ["not json", 400, "invalid_client_params"],
      [JSON.stringify({ client_params: { id: a.id, group: "has space" } }), 400, "invalid_client_params"],
      [new Uint8Array([0x7b, 0xff, 0xfe, 0x7d]), 400, "invalid_client_params"],
      [JSON.stringify({ client_params: { id: a.id }, pad: "x".repeat(20_000) }), 413, "payload_too_large"],
    ];
    for (const [body, status, kind] of bad) {
      for (const op of ["pre-reboot", "steady-state"]) {
        expectFailure(await post(wrong, op, body), 403, "unauthorized");
        expectFailure(await post(elsewhere, op, body), 403, "unauthorized");
        expectFailure(await post(f, op, body), status, kind);
      }
    }
    // A templated group differing from the body's is the body's fault too.
    const mismatch = JSON.stringify({ client_params: { id: a.id, group: "default" } });
    expectFailure(
      await post({ ...wrong, baseUrl: `${wrong.baseUrl}other/` }, "pre-reboot", mismatch),
      403,
      "unauthorized",
    );
    expectFailure(
      await post({ ...f, baseUrl: `${f.baseUrl}other/` }, "pre-reboot", mismatch),
      400,
      "invalid_client_params",
    );
    await nothingHeld(f);
  });

  it("answers a bad body with its refusal, not a 500, when the coordinator cannot check the key", async () => {
    const { f } = await setup();
    const unreachable = new Proxy(
      {},
      { get: () => () => Promise.reject(new Error("simulated: coordinator unreachable")) },
    );
    const REBOOT = new Proxy(env.REBOOT, { get: (t, p) => (p === "get" ? () => unreachable : Reflect.get(t, p)) });
    const ctx = createExecutionContext();
    const res = await createApp().request(
      new URL("v1/pre-reboot", f.baseUrl).toString(),
      { method: "POST", headers: { "fleet-lock-protocol": "true" }, body: "not json" },
      { ...env, REBOOT },
      ctx,
    );
    await waitOnExecutionContext(ctx);
    expectFailure({ status: res.status, json: await res.json() }, 400, "invalid_client_params");
  });

  it("refuses ids no server of the fleet registered with unknown_client", async () => {
    const { f } = await setup();
    expectFailure(await zincati(f.baseUrl, "pre-reboot", "stranger"), 403, "unknown_client");
    expectFailure(await zincati(f.baseUrl, "steady-state", "stranger"), 403, "unknown_client");
    // A server of another fleet with that id does not count.
    const other = await fleetWithKey();
    await registerServer(other.fleet, { fleetlock_id: "stranger" });
    expectFailure(await zincati(f.baseUrl, "pre-reboot", "stranger"), 403, "unknown_client");
    await nothingHeld(f);
  });

  it("admits unknown ids when the fleet allows them; the holder then has no server", async () => {
    const { f } = await setup({ allow_unknown_ids: true });
    expect((await zincati(f.baseUrl, "pre-reboot", "stranger")).status).toBe(200);
    expect((await getGroup(f.fleet, "default")).holders).toMatchObject([{ id: "stranger", server: null }]);
  });

  it("refuses a group that is not configured with unknown_group, unless the fleet has default slots", async () => {
    const { f } = await setup();
    const [w] = await registerClients(f.fleet, 1, "workers");
    expectFailure(await zincati(f.baseUrl, "pre-reboot", w.id, "workers"), 404, "unknown_group");
    expect((await call("GET", `/v1/fleets/${f.fleet}/reboot-groups/workers`)).status).toBe(404);

    const d = await fleetWithKey({ default_group_slots: 1 });
    const [x, y] = await registerClients(d.fleet, 2, "canary");
    expect((await zincati(d.baseUrl, "pre-reboot", x.id, "canary")).status).toBe(200);
    expectFailure(await zincati(d.baseUrl, "pre-reboot", y.id, "canary"), 409, "semaphore_full");
    expect((await getGroup(d.fleet, "canary")).slots).toBe(1);
  });

  it("refuses a registered id asking for a group other than its server's with group_mismatch", async () => {
    const { f, a } = await setup();
    await putGroup(f.fleet, "workers", { slots: 5 });
    expectFailure(await zincati(f.baseUrl, "pre-reboot", a.id, "workers"), 403, "group_mismatch");
    expect((await getGroup(f.fleet, "workers")).holders).toEqual([]);
  });

  it("answers other methods with method_not_allowed and unknown paths with not_found", async () => {
    const { f, a } = await setup();
    for (const method of ["GET", "PUT", "DELETE", "PATCH"]) {
      const res = await raw(new URL("v1/pre-reboot", f.baseUrl).toString(), {
        method,
        headers: { "fleet-lock-protocol": "true" },
        body: method === "GET" ? undefined : JSON.stringify({ client_params: { id: a.id, group: "default" } }),
      });
      expectFailure(res, 405, "method_not_allowed");
      expect(res.headers.get("Allow")).toBe("POST");
    }
    expectFailure(await post(f, "reboot-now", "{}"), 404, "not_found");
    expectFailure(await raw(`/fleetlock/${f.fleet}`, { method: "POST" }), 404, "not_found");
    await nothingHeld(f);
  });

  it("serves a base_url with ${group} templated in by Zincati, and refuses a group differing from the body's", async () => {
    const { f } = await setup();
    await putGroup(f.fleet, "workers", { slots: 1 });
    const [w] = await registerClients(f.fleet, 1, "workers");
    const templated = `${f.baseUrl}workers/`;
    expect((await zincati(templated, "pre-reboot", w.id, "workers")).status).toBe(200);
    expectFailure(await zincati(`${f.baseUrl}default/`, "steady-state", w.id, "workers"), 400, "invalid_client_params");
    expect((await zincati(templated, "steady-state", w.id, "workers")).json).toEqual({ released: true });
  });
});

describe("FleetLock edge cases", () => {
  it("lets an id hold at most one slot in the fleet: asking in a second group is a recursive success", async () => {
    const { f } = await setup({ allow_unknown_ids: true });
    await putGroup(f.fleet, "db", { slots: 1 });
    expect((await zincati(f.baseUrl, "pre-reboot", "roamer", "default")).status).toBe(200);
    expect((await zincati(f.baseUrl, "pre-reboot", "roamer", "db")).status).toBe(200);
    expect((await getGroup(f.fleet, "db")).holders).toEqual([]);
    expect((await zincati(f.baseUrl, "steady-state", "roamer", "db")).json).toEqual({ released: true });
    expect((await getGroup(f.fleet, "default")).holders).toEqual([]);
  });

  it("lets a holder whose fleetlock_id was cleared still release its slot", async () => {
    const { f, a } = await setup();
    await zincati(f.baseUrl, "pre-reboot", a.id);
    expect((await call("PATCH", `/v1/servers/${a.serverId}`, { body: { fleetlock_id: null } })).status).toBe(200);
    expectFailure(await zincati(f.baseUrl, "pre-reboot", "someone-else"), 403, "unknown_client");
    expect((await zincati(f.baseUrl, "steady-state", a.id)).json).toEqual({ released: true });
    expectFailure(await zincati(f.baseUrl, "steady-state", a.id), 403, "unknown_client");
  });

  it("serves a request whose body carries a byte-order mark or surrounding whitespace", async () => {
    const { f, a } = await setup();
    const body = `\n\n  {\n  "client_params": {\n    "group": "default",\n    "id": "${a.id}"\n  }\n}\n`;
    expect((await post(f, "pre-reboot", new TextEncoder().encode(body))).status).toBe(200);
    expect((await post(f, "steady-state", new TextEncoder().encode(`\uFEFF${body}`))).json).toEqual({ released: true });
  });
});
