import { describe, expect, it } from "vitest";
import { BASE, call, createFleet, registerServer, report } from "./helpers";
import { SELF } from "cloudflare:test";
import { encodeCursor } from "../src/http/paging";

async function snapshot(id: string, token: string) {
  const server = await call("GET", `/v1/servers/${id}`);
  const instances = await call("GET", `/v1/instances?server=${id}`);
  const desired = await call("GET", "/v1/agent/desired", { token });
  return { server: server.json, instances: instances.json, desired: desired.json };
}

describe("bad input gets a clear 4xx error and changes nothing", () => {
  it("refuses malformed desired configs and inventory reports with specific codes", async () => {
    const fleet = await createFleet();
    const s = await registerServer(fleet.id);
    await call("PUT", `/v1/servers/${s.id}/desired`, {
      body: { generation: 2, agents: [{ name: "compute", image: "compute:1", version: "1" }] },
    });
    await call("PUT", "/v1/agent/inventory", {
      token: s.token,
      body: report(2, [{ name: "compute", image: "compute:1" }]),
    });
    const before = await snapshot(s.id, s.token);

    const desiredPath = `/v1/servers/${s.id}/desired`;
    const agent = { name: "compute", image: "compute:9", version: "9" };
    const cases: [string, string, Parameters<typeof call>[2], number, string][] = [
      [
        "PUT",
        desiredPath,
        { rawBody: "{not json", headers: { "Content-Type": "application/json" } },
        400,
        "malformed_json",
      ],
      [
        "PUT",
        desiredPath,
        { rawBody: '{"generation":3}', headers: { "Content-Type": "text/plain" } },
        415,
        "unsupported_media_type",
      ],
      ["PUT", desiredPath, { body: { generation: "3", agents: [agent] } }, 400, "validation_failed"],
      ["PUT", desiredPath, { body: { generation: -3, agents: [agent] } }, 400, "validation_failed"],
      ["PUT", desiredPath, { body: { generation: 3.5, agents: [agent] } }, 400, "validation_failed"],
      ["PUT", desiredPath, { body: { generation: 0, agents: [agent] } }, 400, "validation_failed"],
      ["PUT", desiredPath, { body: { generation: 3, agents: [agent], colour: "blue" } }, 400, "validation_failed"],
      [
        "PUT",
        desiredPath,
        { body: { generation: 3, agents: [{ ...agent, version: "9\u001b[2J" }] } },
        400,
        "validation_failed",
      ],
      [
        "PUT",
        desiredPath,
        { body: { generation: 3, agents: [{ ...agent, image: "compute\u0007:9" }] } },
        400,
        "validation_failed",
      ],
      ["PUT", desiredPath, { body: { generation: 3, agents: [{ ...agent, extra: 1 }] } }, 400, "validation_failed"],
      [
        "PUT",
        desiredPath,
        { body: { generation: 3, agents: [agent, { ...agent, image: "compute:8" }] } },
        400,
        "duplicate_agent",
      ],
      [
        "PUT",
        desiredPath,
        { body: { generation: 3, agents: [{ ...agent, name: "Bad Name" }] } },
        400,
        "validation_failed",
      ],
      [
        "PUT",
        desiredPath,
        { body: { generation: 3, agents: [agent], lifecycle: "explode" } },
        400,
        "validation_failed",
      ],
      [
        "PUT",
        desiredPath,
        { body: { generation: 3, agents: [{ ...agent, instance_id: "not-a-uuid" }] } },
        400,
        "validation_failed",
      ],
      ["PUT", "/v1/servers/-not-a-name-/desired", { body: { generation: 3, agents: [agent] } }, 400, "invalid_param"],
      [
        "PUT",
        desiredPath,
        {
          rawBody: JSON.stringify({ generation: 3, agents: [{ ...agent, image: "x".repeat(1024 * 1024) }] }),
          headers: { "Content-Type": "application/json" },
        },
        413,
        "payload_too_large",
      ],
      [
        "PUT",
        "/v1/agent/inventory",
        { token: s.token, rawBody: "[1,2", headers: { "Content-Type": "application/json" } },
        400,
        "malformed_json",
      ],
      [
        "PUT",
        "/v1/agent/inventory",
        { token: s.token, body: { ...report(2, []), generation: -1 } },
        400,
        "validation_failed",
      ],
      [
        "PUT",
        "/v1/agent/inventory",
        { token: s.token, body: { ...report(2, []), reconciled_at: "yesterday" } },
        400,
        "validation_failed",
      ],
      [
        "PUT",
        "/v1/agent/inventory",
        {
          token: s.token,
          body: report(2, [
            { name: "a", image: "a:1" },
            { name: "a", image: "a:2" },
          ]),
        },
        400,
        "duplicate_agent",
      ],
      [
        "PUT",
        "/v1/agent/inventory",
        { token: s.token, body: report(2, [{ name: "a", image: "a:1", state: "dancing" }]) },
        400,
        "validation_failed",
      ],
      [
        "PUT",
        "/v1/agent/inventory",
        { token: s.token, body: { ...report(2, []), errors: [{ agent: "a", op: "explode", message: "x" }] } },
        400,
        "validation_failed",
      ],
      [
        "PUT",
        "/v1/agent/inventory",
        { token: s.token, body: { ...report(2, []), surprise: true } },
        400,
        "validation_failed",
      ],
      ["PUT", "/v1/agent/inventory", { token: s.token, body: report(3, []) }, 409, "generation_not_issued"],
    ];
    for (const [method, path, opts, status, code] of cases) {
      const res = await call(method, path, opts);
      expect(res.status, `${method} ${path} ${JSON.stringify(opts).slice(0, 120)}`).toBe(status);
      expect(res.json.error.code, `${method} ${path} ${JSON.stringify(opts).slice(0, 120)}`).toBe(code);
      expect(typeof res.json.error.message).toBe("string");
    }
    const after = await snapshot(s.id, s.token);
    expect(after).toEqual(before);
  });

  it("refuses bad registrations and fleets without creating anything", async () => {
    const fleet = await createFleet();
    const cases: [string, unknown, number, string][] = [
      ["/v1/servers", { fleet: "no-such-fleet", hostname: "a.example", kind: "managed" }, 422, "unknown_fleet"],
      ["/v1/servers", { fleet: fleet.id, hostname: "a.example", kind: "borrowed" }, 400, "validation_failed"],
      ["/v1/servers", { fleet: fleet.id, hostname: "not a hostname", kind: "managed" }, 400, "validation_failed"],
      [
        "/v1/servers",
        { fleet: fleet.id, hostname: "a.example", kind: "managed", reboot_group: "bad/group" },
        400,
        "validation_failed",
      ],
      ["/v1/servers", { fleet: fleet.id, kind: "managed" }, 400, "validation_failed"],
      ["/v1/fleets", { id: "Bad_Fleet" }, 400, "validation_failed"],
      ["/v1/fleets", { id: fleet.id }, 409, "already_exists"],
      ["/v1/fleets", { id: "ok-id", stale_after_s: -5 }, 400, "validation_failed"],
    ];
    for (const [path, body, status, code] of cases) {
      const res = await call("POST", path, { body });
      expect(res.status, `${path} ${JSON.stringify(body)}`).toBe(status);
      expect(res.json.error.code, `${path} ${JSON.stringify(body)}`).toBe(code);
    }
    expect((await call("GET", `/v1/servers?fleet=${fleet.id}`)).json.items).toEqual([]);
    expect((await call("GET", "/v1/fleets/ok-id")).status).toBe(404);
  });

  it("refuses a second server with a fleetlock_id already used in the fleet", async () => {
    const fleet = await createFleet();
    await registerServer(fleet.id, { fleetlock_id: "node-a" });
    const dup = await call("POST", "/v1/servers", {
      body: { fleet: fleet.id, hostname: "b.example", kind: "managed", fleetlock_id: "node-a" },
    });
    expect(dup.status).toBe(409);
    expect(dup.json.error.code).toBe("fleetlock_id_taken");
    expect((await call("GET", `/v1/servers?fleet=${fleet.id}`)).json.items).toHaveLength(1);
  });

  it("reads numeric query parameters as plain decimal digits, naming the parameter otherwise", async () => {
    const fleet = await createFleet();
    const s = await registerServer(fleet.id);
    const cases: [string, string][] = [
      ["/v1/servers?limit=0x10", "limit"],
      ["/v1/servers?limit=1e1", "limit"],
      ["/v1/servers?limit=", "limit"],
      ["/v1/servers?limit=%205", "limit"],
      ["/v1/servers?limit=5.0", "limit"],
      ["/v1/audit?limit=0b11", "limit"],
      [`/v1/servers/${s.id}?wait=`, "wait"],
      [`/v1/servers/${s.id}?wait=0x1`, "wait"],
      ["/v1/agent/desired?wait=", "wait"],
      ["/v1/status?attention=", "attention"],
    ];
    for (const [path, param] of cases) {
      const res = await call("GET", path, path.startsWith("/v1/agent/") ? { token: s.token } : {});
      expect(res.status, path).toBe(400);
      expect(res.json.error.code, path).toBe("invalid_query");
      expect(res.json.error.details, path).toEqual([expect.objectContaining({ path: param })]);
    }
    const empty = await call("GET", "/v1/servers?limit=");
    expect(empty.json.error.message).toContain("limit: empty");
    // Plain digits still work, leading zeros included.
    const ok = await call("GET", "/v1/servers?limit=016");
    expect(ok.status).toBe(200);
  });

  it("answers bad query parameters, bad cursors, unknown routes and wrong methods with JSON errors", async () => {
    expect((await call("GET", "/v1/servers?limit=0")).json.error.code).toBe("invalid_query");
    expect((await call("GET", "/v1/servers?limit=501")).json.error.code).toBe("invalid_query");
    expect((await call("GET", "/v1/servers?status=happy")).json.error.code).toBe("invalid_query");
    expect((await call("GET", "/v1/instances?cursor=!!!")).json.error.code).toBe("invalid_cursor");
    // Well-formed cursors whose id is not a number: lists keyed by integer ids refuse them too.
    const forged = encodeCursor(["abc"]);
    for (const path of ["/v1/audit", "/v1/upgrades"]) {
      const res = await call("GET", `${path}?cursor=${forged}`);
      expect(res.status, path).toBe(400);
      expect(res.json.error.code, path).toBe("invalid_cursor");
    }
    const unknown = await call("GET", "/v1/nothing-here");
    expect(unknown.status).toBe(404);
    expect(unknown.json.error.code).toBe("not_found");
    const wrongMethod = await call("DELETE", "/v1/fleets");
    expect(wrongMethod.status).toBe(405);
    expect(wrongMethod.json.error.code).toBe("method_not_allowed");
    const res = await SELF.fetch(`${BASE}/v1/servers/${crypto.randomUUID()}`, {
      headers: { Authorization: "Bearer test-admin-token" },
    });
    expect(res.status).toBe(404);
    expect((await res.json<any>()).error.code).toBe("not_found");
  });
});
