import { describe, expect, it } from "vitest";
import { call, createFleet } from "./helpers";
import { fleetWithKey, getGroup, putGroup, raw, registerClients, type FleetLockFleet } from "./fleetlock-helpers";

const fleetBody = (id: string) => JSON.stringify({ id });

describe("a /v1 body is read as what its headers claim, or refused with 415", () => {
  it("refuses a body declaring a content coding it is not sent in, and creates nothing", async () => {
    for (const encoding of ["gzip", "br", "deflate, identity", "x-custom"]) {
      const id = `enc-${crypto.randomUUID().slice(0, 8)}`;
      const res = await call("POST", "/v1/fleets", {
        rawBody: fleetBody(id),
        headers: { "Content-Type": "application/json", "Content-Encoding": encoding },
      });
      expect(res.status, encoding).toBe(415);
      expect(res.json.error.code, encoding).toBe("unsupported_content_encoding");
      expect(res.json.error.details).toEqual({ content_encoding: encoding });
      expect((await call("GET", `/v1/fleets/${id}`)).status).toBe(404);
    }
  });

  it("refuses a body labelled with a charset other than UTF-8, and creates nothing", async () => {
    for (const type of [
      "application/json; charset=utf-16",
      "application/json;charset=ISO-8859-1",
      'application/json; charset="utf-16le"',
    ]) {
      const id = `cs-${crypto.randomUUID().slice(0, 8)}`;
      const res = await call("POST", "/v1/fleets", { rawBody: fleetBody(id), headers: { "Content-Type": type } });
      expect(res.status, type).toBe(415);
      expect(res.json.error.code, type).toBe("unsupported_charset");
      expect((await call("GET", `/v1/fleets/${id}`)).status).toBe(404);
    }
  });

  it("accepts UTF-8 however it is spelled, and the identity coding", async () => {
    for (const headers of <Record<string, string>[]>[
      { "Content-Type": "application/json; charset=utf-8" },
      { "Content-Type": 'application/json; charset="UTF-8"' },
      { "Content-Type": "application/json; charset=utf8" },
      { "Content-Type": "application/json", "Content-Encoding": "identity" },
    ]) {
      const id = `ok-${crypto.randomUUID().slice(0, 8)}`;
      const res = await call("POST", "/v1/fleets", { rawBody: fleetBody(id), headers });
      expect(res.status, JSON.stringify(headers)).toBe(201);
    }
  });
});

describe("FleetLock reads raw bytes, but refuses a body that declares another coding or charset", () => {
  async function setup() {
    const f = await fleetWithKey();
    await putGroup(f.fleet, "default", { slots: 5 });
    const [a] = await registerClients(f.fleet, 1);
    return { f, a };
  }
  const post = (f: FleetLockFleet, body: string, headers: Record<string, string>) =>
    raw(new URL("v1/pre-reboot", f.baseUrl).toString(), {
      method: "POST",
      headers: { "fleet-lock-protocol": "true", ...headers },
      body,
    });

  it("answers invalid_client_params in its {kind,value} body and grants nothing", async () => {
    const { f, a } = await setup();
    const body = JSON.stringify({ client_params: { id: a.id, group: "default" } });
    for (const headers of <Record<string, string>[]>[
      { "Content-Encoding": "gzip" },
      { "Content-Type": "application/json; charset=utf-16" },
      { "Content-Type": "text/plain; charset=latin1" },
    ]) {
      const res = await post(f, body, headers);
      expect(res.status, JSON.stringify(headers)).toBe(400);
      expect(res.json).toEqual({
        kind: "invalid_client_params",
        value: expect.stringMatching(/Content-Encoding|charset/),
      });
    }
    expect((await getGroup(f.fleet, "default")).holders).toEqual([]);
    // The same body declared as UTF-8 (or with no Content-Type at all, as Zincati sends it) is granted.
    expect((await post(f, body, { "Content-Type": "application/json; charset=utf-8" })).status).toBe(200);
  });
});

describe("the FleetLock body is parsed by the schema that documents it", () => {
  it("enforces exactly the client id and group limits the OpenAPI document states", async () => {
    const doc = (await call("GET", "/openapi.json", { token: null })).json;
    const params = doc.components.schemas.FleetLockRequest.properties.client_params.properties;
    const idMax: number = params.id.maxLength;
    const groupMax: number = params.group.maxLength;
    expect(idMax).toBeGreaterThan(0);
    expect(groupMax).toBeGreaterThan(0);

    const f = await fleetWithKey();
    const post = (id: string, group = "default") =>
      raw(new URL("v1/pre-reboot", f.baseUrl).toString(), {
        method: "POST",
        headers: { "fleet-lock-protocol": "true" },
        body: JSON.stringify({ client_params: { id, group } }),
      });
    // At the documented limit the body is valid (the id is merely unknown); one past it is not.
    expect((await post("x".repeat(idMax))).json.kind).toBe("unknown_client");
    expect((await post("x".repeat(idMax + 1))).json.kind).toBe("invalid_client_params");
    expect((await post("node", "g".repeat(groupMax))).json.kind).toBe("unknown_client");
    expect((await post("node", "g".repeat(groupMax + 1))).json.kind).toBe("invalid_client_params");
    // The same limit holds where operators set the id: registration takes idMax and refuses idMax + 1.
    const { id: fleet } = await createFleet();
    const reg = (fleetlock_id: string) =>
      call("POST", "/v1/servers", { body: { fleet, hostname: "limit.example.com", kind: "managed", fleetlock_id } });
    expect((await reg("y".repeat(idMax + 1))).status).toBe(400);
    expect((await reg("y".repeat(idMax))).status).toBe(201);
  });
});
