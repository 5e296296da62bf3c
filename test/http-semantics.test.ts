import { createExecutionContext, env, waitOnExecutionContext } from "cloudflare:test";
import { afterEach, describe, expect, it, vi } from "vitest";
import { createApp } from "../src/app";
import { allowedMethodsFinder } from "../src/http/allow";
import { ADMIN, BASE, call, createFleet, registerServer } from "./helpers";
import { fleetWithKey, putGroup, registerClients, zincati } from "./fleetlock-helpers";

/** The app itself with bindings changed (CORS origins, a missing ADMIN_TOKEN). */
async function withEnv(overrides: Partial<typeof env>, path: string, init: RequestInit = {}) {
  const ctx = createExecutionContext();
  const res = await createApp().request(`${BASE}${path}`, init, { ...env, ...overrides }, ctx);
  await waitOnExecutionContext(ctx);
  return res;
}

describe("405 with Allow for a known path and a wrong method", () => {
  it("names the methods the path takes, for collections, items and nested resources", async () => {
    const fleet = await createFleet();
    const s = await registerServer(fleet.id);
    const cases: [string, string, string][] = [
      ["DELETE", "/v1/fleets", "GET, HEAD, POST"],
      ["PUT", `/v1/fleets/${fleet.id}`, "DELETE, GET, HEAD, PATCH"],
      ["POST", `/v1/servers/${s.id}`, "GET, HEAD, PATCH"],
      ["DELETE", `/v1/servers/${s.id}/desired`, "GET, HEAD, PUT"],
      ["POST", "/v1/agent/desired", "GET, HEAD"],
      ["GET", "/v1/upgrades/run", "POST"],
      ["POST", "/healthz", "GET, HEAD"],
    ];
    for (const [method, path, allow] of cases) {
      const res = await call(method, path, {
        token: method === "POST" && path === "/v1/agent/desired" ? s.token : ADMIN,
      });
      expect(res.status, `${method} ${path}`).toBe(405);
      expect(res.headers.get("Allow"), `${method} ${path}`).toBe(allow);
      expect(res.json.error.code).toBe("method_not_allowed");
      expect(res.json.error.details.allow).toEqual(allow.split(", "));
    }
    // A path no route has stays 404.
    expect((await call("GET", "/v1/nothing")).status).toBe(404);
  });
});

describe("the 405 finder honours constrained route parameters", () => {
  it("reads a parameter's constraint, so a value the route refuses is not a wrong method", () => {
    const finder = allowedMethodsFinder(() => [
      { method: "POST", path: "/things/:id{[0-9a-f-]{36}}/refresh", basePath: "/", handler: () => null },
      { method: "GET", path: "/things/:id{[a-z]{1,3}}", basePath: "/", handler: () => null },
      { method: "GET", path: "/plain/:id", basePath: "/", handler: () => null },
    ]);
    expect(finder(`/things/${"a".repeat(8)}-0000-0000-0000-${"b".repeat(12)}/refresh`)).toEqual(["POST"]);
    expect(finder("/things/not-a-uuid/refresh")).toEqual([]);
    expect(finder("/things/abc")).toEqual(["GET", "HEAD"]);
    expect(finder("/things/abcd")).toEqual([]);
    expect(finder("/plain/anything")).toEqual(["GET", "HEAD"]);
  });
});

describe("If-None-Match as RFC 9110 reads it", () => {
  it("answers 304 when any listed tag is current, or for *, and 200 when none is", async () => {
    const fleet = await createFleet();
    const s = await registerServer(fleet.id);
    await call("PUT", `/v1/servers/${s.id}/desired`, { body: { generation: 2, agents: [] } });
    const poll = (inm: string) =>
      call("GET", "/v1/agent/desired", { token: s.token, headers: { "If-None-Match": inm } });
    for (const inm of ['"1", "2"', '"2", "1"', 'W/"1", W/"2"', "*", ' "7", "2" ']) {
      const res = await poll(inm);
      expect(res.status, inm).toBe(304);
      expect(res.headers.get("ETag")).toBe('"2"');
    }
    for (const inm of ['"1"', '"1", "3"', '"x"']) {
      const res = await poll(inm);
      expect(res.status, inm).toBe(200);
      expect(res.json.generation).toBe(2);
    }
  });

  it("reads a long list whole and takes a long or odd one as a tag that does not match, never a 400", async () => {
    const fleet = await createFleet();
    const s = await registerServer(fleet.id);
    const many = Array.from({ length: 60 }, (_, i) => `W/"zz${i}"`).join(", ");
    expect(many.length).toBeGreaterThan(400);
    const poll = (inm: string) =>
      call("GET", "/v1/agent/desired", { token: s.token, headers: { "If-None-Match": inm } });
    expect((await poll(`${many}, "1"`)).status).toBe(304);
    const view = (inm: string, wait = 0) =>
      call("GET", `/v1/servers/${s.id}${wait ? `?wait=${wait}` : ""}`, { headers: { "If-None-Match": inm } });
    const tag = (await view("")).headers.get("ETag")!;
    expect((await view(`${many}, ${tag}`)).status).toBe(304);
    for (const odd of [many, "x".repeat(3000), `"${"9".repeat(500)}"`]) {
      expect((await poll(odd)).status, odd.slice(0, 30)).toBe(200);
      expect((await view(odd)).status, odd.slice(0, 30)).toBe(200);
    }
    // Asked to wait with a single long tag: it cannot be the view's, so the view is answered at once.
    const started = Date.now();
    expect((await view(`W/"${"a".repeat(400)}"`, 5)).status).toBe(200);
    expect(Date.now() - started).toBeLessThan(4000);
  });

  it("answers * at once even when asked to wait, since any current config matches", async () => {
    const fleet = await createFleet();
    const s = await registerServer(fleet.id);
    const started = Date.now();
    const res = await call("GET", "/v1/agent/desired?wait=5", { token: s.token, headers: { "If-None-Match": "*" } });
    expect(res.status).toBe(304);
    expect(Date.now() - started).toBeLessThan(4000);
  });
});

describe("Location on every 201 that creates a resource with its own URL", () => {
  it("points fleets, servers and tokens at the URL that reads them", async () => {
    const id = `loc-${crypto.randomUUID().slice(0, 8)}`;
    const fleet = await call("POST", "/v1/fleets", { body: { id } });
    expect(fleet.headers.get("Location")).toBe(`/v1/fleets/${id}`);
    const server = await call("POST", "/v1/servers", {
      body: { fleet: id, hostname: "loc.example.com", kind: "managed" },
    });
    expect(server.headers.get("Location")).toBe(`/v1/servers/${server.json.id}`);
    const token = await call("POST", "/v1/tokens", { body: { name: "loc", scope: "read" } });
    expect(token.headers.get("Location")).toBe(`/v1/tokens/${token.json.id}`);
    for (const res of [fleet, server, token]) {
      const read = await call("GET", res.headers.get("Location")!);
      expect(read.status).toBe(200);
      expect(read.json.id).toBe(res.json.id);
    }
  });
});

describe("Location on every 201, including those whose answer wraps what was created", () => {
  it("names a new webhook, the fleet of a new FleetLock key and a fleet a spec created; each URL answers GET", async () => {
    const fleet = await createFleet();
    const hook = await call("POST", `/v1/fleets/${fleet.id}/webhooks`, {
      body: { url: "https://hooks.example.com/loc", events: ["server.failed"] },
    });
    expect(hook.status).toBe(201);
    expect(hook.headers.get("Location")).toBe(`/v1/fleets/${fleet.id}/webhooks/${hook.json.webhook.id}`);
    const key = await call("POST", `/v1/fleets/${fleet.id}/fleetlock-key`);
    expect(key.status).toBe(201);
    expect(key.headers.get("Location")).toBe(`/v1/fleets/${fleet.id}`);
    const specFleet = `loc-spec-${crypto.randomUUID().slice(0, 8)}`;
    const spec = await call("PUT", `/v1/fleets/${specFleet}/spec`, {
      body: { apiVersion: "harbormaster/v1", kind: "FleetSpec", fleet: specFleet },
    });
    expect(spec.status).toBe(201);
    expect(spec.headers.get("Location")).toBe(`/v1/fleets/${specFleet}`);
    const again = await call("PUT", `/v1/fleets/${specFleet}/spec`, {
      body: { apiVersion: "harbormaster/v1", kind: "FleetSpec", fleet: specFleet },
    });
    expect(again.status).toBe(200);
    expect(again.headers.get("Location")).toBeNull();
    expect((await call("GET", hook.headers.get("Location")!)).json.id).toBe(hook.json.webhook.id);
    expect((await call("GET", key.headers.get("Location")!)).json.id).toBe(fleet.id);
    expect((await call("GET", spec.headers.get("Location")!)).json.id).toBe(specFleet);
  });
});

describe("unknown query parameters are 400 invalid_query naming them", () => {
  it("refuses a typo instead of returning everything, on lists and single resources", async () => {
    const fleet = await createFleet();
    const s = await registerServer(fleet.id);
    const res = await call("GET", `/v1/servers?fleet=${fleet.id}&hostnme=x`);
    expect(res.status).toBe(400);
    expect(res.json.error.code).toBe("invalid_query");
    expect(res.json.error.message).toContain("hostnme");
    expect(res.json.error.details.unknown).toEqual(["hostnme"]);
    for (const path of [
      `/v1/servers/${s.id}?verbose=1`,
      "/v1/instances?imgae=x&limit=1",
      `/v1/fleets/${fleet.id}/reboot-groups?all=1`,
    ]) {
      const r = await call("GET", path);
      expect(r.status, path).toBe(400);
      expect(r.json.error.code, path).toBe("invalid_query");
    }
    const host = await call("GET", "/v1/agent/desired?wiat=5", { token: s.token });
    expect(host.status).toBe(400);
    expect(host.json.error.details.unknown).toEqual(["wiat"]);
    // Known parameters still work.
    expect((await call("GET", `/v1/servers?fleet=${fleet.id}&limit=5`)).status).toBe(200);
  });
});

describe("a request id on every route", () => {
  it("returns a sane X-Request-Id the client sent, and makes one otherwise", async () => {
    const fleet = await fleetWithKey();
    await putGroup(fleet.fleet, "default", { slots: 1 });
    const [a] = await registerClients(fleet.fleet, 1);
    const sent = await call("GET", "/healthz", { token: null, headers: { "X-Request-Id": "trace-abc-123" } });
    expect(sent.headers.get("X-Request-Id")).toBe("trace-abc-123");
    const made = await call("GET", "/healthz", { token: null });
    expect(made.headers.get("X-Request-Id")).toMatch(/^[0-9a-f-]{36}$/);
    // A header that is not a plain token (here with a newline-like payload) is replaced, not echoed.
    const odd = await call("GET", "/healthz", { token: null, headers: { "X-Request-Id": "a b<script>" } });
    expect(odd.headers.get("X-Request-Id")).toMatch(/^[0-9a-f-]{36}$/);
    const fl = await zincati(fleet.baseUrl, "pre-reboot", a.id);
    expect(fl.status).toBe(200);
    expect(fl.headers.get("X-Request-Id")).toMatch(/^[0-9a-f-]{36}$/);
    expect((await call("GET", "/v1/fleets")).headers.get("X-Request-Id")).toBeTruthy();
  });

  it("puts the request id in every error body", async () => {
    const res = await call("GET", "/v1/servers/-not-a-name-", { headers: { "X-Request-Id": "req-42" } });
    expect(res.status).toBe(400);
    expect(res.json.error.request_id).toBe("req-42");
    const missing = await call("GET", "/v1/nothing", { headers: { "X-Request-Id": "req-43" } });
    expect(missing.json.error.request_id).toBe("req-43");
    const unauth = await call("GET", "/v1/fleets", { token: "nope", headers: { "X-Request-Id": "req-44" } });
    expect(unauth.json.error.request_id).toBe("req-44");
  });
});

describe("CORS for configured origins, off by default", () => {
  const preflight = {
    method: "OPTIONS",
    headers: {
      Origin: "https://dash.example",
      "Access-Control-Request-Method": "PUT",
      "Access-Control-Request-Headers": "authorization, content-type",
    },
  };

  it("sends no CORS header and answers no preflight when CORS_ORIGINS is empty", async () => {
    const res = await withEnv({ CORS_ORIGINS: "" }, "/v1/fleets", {
      headers: { Origin: "https://dash.example", Authorization: `Bearer ${ADMIN}` },
    });
    expect(res.status).toBe(200);
    expect(res.headers.get("Access-Control-Allow-Origin")).toBeNull();
    const pre = await withEnv({ CORS_ORIGINS: "" }, "/v1/fleets", preflight);
    expect(pre.status).toBe(405);
    expect(pre.headers.get("Access-Control-Allow-Origin")).toBeNull();
  });

  it("answers a configured origin's preflight and exposes the headers a page needs", async () => {
    const origins = { CORS_ORIGINS: "https://other.example, https://dash.example" };
    const pre = await withEnv(origins, "/v1/fleets", preflight);
    expect(pre.status).toBe(204);
    expect(pre.headers.get("Access-Control-Allow-Origin")).toBe("https://dash.example");
    expect(pre.headers.get("Access-Control-Allow-Methods")).toContain("PUT");
    expect(pre.headers.get("Access-Control-Allow-Headers")?.toLowerCase()).toContain("authorization");
    const res = await withEnv(origins, "/v1/fleets", {
      headers: { Origin: "https://dash.example", Authorization: `Bearer ${ADMIN}` },
    });
    expect(res.headers.get("Access-Control-Allow-Origin")).toBe("https://dash.example");
    expect(res.headers.get("Access-Control-Expose-Headers")).toContain("X-Request-Id");
    // Another origin gets nothing it could use.
    const other = await withEnv(origins, "/v1/fleets", {
      headers: { Origin: "https://evil.example", Authorization: `Bearer ${ADMIN}` },
    });
    expect(other.headers.get("Access-Control-Allow-Origin")).toBeNull();
  });
});

describe("a deployment without ADMIN_TOKEN", () => {
  it("explains the missing secret instead of a bare 401", async () => {
    const res = await withEnv({ ADMIN_TOKEN: undefined as unknown as string }, "/v1/fleets", {
      headers: { Authorization: "Bearer guess" },
    });
    expect(res.status).toBe(401);
    const body = await res.json<any>();
    expect(body.error.message).toContain("wrangler secret put ADMIN_TOKEN");
    expect(body.error.details).toEqual({ admin_token_configured: false });
    // With the secret set, a wrong token is a plain 401 that says nothing about the configuration.
    const plain = await call("GET", "/v1/fleets", { token: "guess" });
    expect(plain.status).toBe(401);
    expect(plain.json.error.message).not.toContain("ADMIN_TOKEN");
  });
});

describe("one structured log line per request", () => {
  afterEach(() => vi.restoreAllMocks());

  const linesOf = (spy: ReturnType<typeof vi.spyOn>) =>
    spy.mock.calls
      .map((args: unknown[]) => {
        try {
          return JSON.parse(String(args[0]));
        } catch {
          return null;
        }
      })
      .filter((l: any) => l && l.msg === "request");

  it("logs request id, method, route pattern, status, duration and principal, never the FleetLock key", async () => {
    const fleet = await fleetWithKey();
    await putGroup(fleet.fleet, "default", { slots: 1 });
    const [a] = await registerClients(fleet.fleet, 1);
    const log = vi.spyOn(console, "log");
    await call("GET", `/v1/fleets/${fleet.fleet}`, { headers: { "X-Request-Id": "log-1" } });
    await zincati(fleet.baseUrl, "pre-reboot", a.id);
    const lines = linesOf(log);
    const op = lines.find((l: any) => l.request_id === "log-1");
    expect(op).toMatchObject({
      level: "info",
      method: "GET",
      route: "/v1/fleets/:id",
      status: 200,
      principal: "token:bootstrap",
    });
    expect(typeof op.duration_ms).toBe("number");
    const host = lines.find((l: any) => l.route?.startsWith("/fleetlock/"));
    expect(host).toMatchObject({
      method: "POST",
      route: "/fleetlock/:fleet/:key/v1/pre-reboot",
      status: 200,
      principal: `fleetlock:${fleet.fleet}`,
    });
    expect(JSON.stringify(log.mock.calls)).not.toContain(fleet.key);
  });

  it("logs an unhandled error as one JSON line with its stack and the request id, and answers 500 with that id", async () => {
    const failing = new Proxy(env.DB, {
      get(target, prop) {
        if (prop === "prepare" || prop === "batch") {
          return () => {
            throw new Error("D1_ERROR: simulated outage");
          };
        }
        return Reflect.get(target, prop);
      },
    });
    const errors = vi.spyOn(console, "error");
    const res = await withEnv({ DB: failing }, "/v1/fleets", {
      headers: { Authorization: `Bearer ${ADMIN}`, "X-Request-Id": "boom-1" },
    });
    expect(res.status).toBe(500);
    expect((await res.json<any>()).error).toMatchObject({ code: "internal_error", request_id: "boom-1" });
    const lines = errors.mock.calls.map((args) => {
      try {
        return JSON.parse(String(args[0]));
      } catch {
        return null;
      }
    });
    const line = lines.find((l) => l?.msg === "unhandled error" && l.request_id === "boom-1");
    expect(line).toMatchObject({
      level: "error",
      method: "GET",
      route: "/v1/fleets",
      error: expect.stringContaining("simulated outage"),
    });
    expect(line.stack).toContain("simulated outage");
  });
});

describe("the access log switch", () => {
  afterEach(() => vi.restoreAllMocks());

  it("writes no request line when ACCESS_LOG is off, and one when it is on", async () => {
    const log = vi.spyOn(console, "log");
    await withEnv({ ACCESS_LOG: "off" }, "/healthz", { headers: { "X-Request-Id": "quiet-1" } });
    await withEnv({ ACCESS_LOG: "on" }, "/healthz", { headers: { "X-Request-Id": "loud-1" } });
    const text = JSON.stringify(log.mock.calls);
    expect(text).not.toContain("quiet-1");
    expect(text).toContain("loud-1");
  });

  it("writes a request line only for requests that may change state or failed on the server, as deployed (writes)", async () => {
    const log = vi.spyOn(console, "log");
    const errors = vi.spyOn(console, "error");
    const admin = { Authorization: `Bearer ${ADMIN}` };
    const failing = new Proxy(env.DB, {
      get: (target, prop) =>
        prop === "prepare" || prop === "batch"
          ? () => {
              throw new Error("D1_ERROR: simulated outage");
            }
          : Reflect.get(target, prop),
    });
    await withEnv({ ACCESS_LOG: "writes" }, "/v1/fleets", { headers: { ...admin, "X-Request-Id": "read-1" } });
    await withEnv({ ACCESS_LOG: "writes" }, "/v1/fleets", {
      method: "POST",
      body: JSON.stringify({ id: "written-fleet-1x" }),
      headers: { ...admin, "Content-Type": "application/json", "X-Request-Id": "write-1" },
    });
    await withEnv({ ACCESS_LOG: "writes", DB: failing }, "/v1/fleets", {
      headers: { ...admin, "X-Request-Id": "broken-1" },
    });
    const lines = [...log.mock.calls, ...errors.mock.calls]
      .map((args) => String(args[0]))
      .filter((l) => l.includes('"msg":"request"'));
    expect(lines.some((l) => l.includes("read-1"))).toBe(false);
    expect(lines.some((l) => l.includes("write-1"))).toBe(true);
    expect(lines.some((l) => l.includes("broken-1"))).toBe(true);
  });
});
