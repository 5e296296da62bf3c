/**
 * Every operation of the OpenAPI document (enumerated, so a route added later is covered) sent with
 * every wrong credential a caller can hold: none, garbage, an operator token of the right form that
 * names no row, an expired one, a revoked one, a read token on a write, a server token, an enrollment
 * token and the fleet's FleetLock key on operator routes; and the FleetLock routes with operator,
 * server and enrollment tokens where the key goes. Each answers 401 or 403 in the error shape, and
 * nothing changes (D1 and the fleet's objects compared before and after). Another fleet's token is
 * test/access-isolation.test.ts's walk.
 */
import { env } from "cloudflare:test";
import { beforeAll, describe, expect, it } from "vitest";
import { ADMIN, call, uniq } from "./helpers";
import { errorShapeProblem, fill, fingerprint, isOpen, operations, walkWorld, type WalkWorld } from "./walk-helpers";

let w: WalkWorld;
const wrong: Record<string, { token: string | null; headers?: Record<string, string> }> = {};

async function operatorToken(scope: string) {
  const res = await call("POST", "/v1/tokens", { body: { name: uniq("wrong"), scope } });
  expect(res.status).toBe(201);
  return res.json as { id: string; token: string };
}

beforeAll(async () => {
  w = await walkWorld();
  const revoked = await operatorToken("admin");
  expect((await call("DELETE", `/v1/tokens/${revoked.id}`)).status).toBe(200);
  const expired = await operatorToken("admin");
  // An expiry in the past cannot be asked for; the row is aged instead.
  await env.DB.prepare("UPDATE tokens SET expires_at = ? WHERE id = ?")
    .bind(Date.now() - 1000, expired.id)
    .run();
  Object.assign(wrong, {
    none: { token: null },
    garbage: { token: "garbage" },
    "unknown hmo": { token: `hmo.00000000-0000-4000-8000-000000000000.${"A".repeat(43)}` },
    "admin token with a byte changed": { token: `${ADMIN.slice(0, -1)}${ADMIN.endsWith("x") ? "y" : "x"}` },
    expired: { token: expired.token },
    revoked: { token: revoked.token },
    "FleetLock key": { token: w.key },
    "enrollment token": { token: w.enrollment.token },
    "Basic scheme": { token: null, headers: { Authorization: `Basic ${btoa(`admin:${ADMIN}`)}` } },
    "two bearers": { token: null, headers: { Authorization: `Bearer ${ADMIN}, Bearer ${ADMIN}` } },
    "64 KB bearer": { token: "x".repeat(64 * 1024) },
  });
});

/** POSTs that change nothing, which a read token may send (a diff of a spec against the fleet). */
const READS_BY_POST = ["POST /v1/fleets/{fleet}/spec:diff"];

/** A body the route would take from the right caller, so that only who sends it can be refused. */
function bodyFor(op: any) {
  const content = op.requestBody?.content ?? {};
  if (content["application/octet-stream"] && !content["application/json"]) {
    return { rawBody: "bytes", headers: { "Content-Type": "application/octet-stream" } };
  }
  return op.requestBody ? { body: {} } : {};
}

describe("every operation with every wrong credential", () => {
  it("answers 401 (or 403 for a token that is real but not an operator's) in the error shape, and changes nothing", async () => {
    const ops = await operations();
    expect(ops.length).toBeGreaterThan(100);
    const before = await fingerprint(w);
    const problems: string[] = [];
    let sent = 0;
    for (const { method, path, op } of ops) {
      if (isOpen(op)) continue;
      const host = path.startsWith("/v1/agent/") && !/^\/v1\/agent\/(builds|enroll)/.test(path);
      for (const [name, who] of Object.entries(wrong)) {
        // The enrollment route takes exactly the enrollment token: its own walk is below.
        if (path === "/v1/agent/enroll" && name === "enrollment token") continue;
        const base = bodyFor(op);
        const res = await call(method, fill(w, path), {
          ...base,
          token: who.token,
          headers: { ...("headers" in base ? base.headers : {}), ...who.headers },
        });
        sent++;
        const where = `${name}: ${method} ${path} → ${res.status}`;
        if (res.status !== 401) problems.push(`${where} ${JSON.stringify(res.json).slice(0, 160)}`);
        const shape = errorShapeProblem(path, res.json);
        if (shape) problems.push(`${where}: ${shape}`);
        if (res.status === 401 && !host && !res.headers.get("WWW-Authenticate"))
          problems.push(`${where}: no WWW-Authenticate`);
      }
      // A real token of the wrong kind is known, and refused as such: 403.
      const kinds: [string, string, boolean][] = [
        ["server token", w.server.token, !host],
        ["read token on a write", w.token.token, method !== "GET" && !READS_BY_POST.includes(`${method} ${path}`)],
      ];
      for (const [name, token, refused] of kinds) {
        if (!refused || path === "/v1/agent/enroll") continue;
        // Reads an admin alone may make (tokens, SSO) refuse a read token too; those are GETs, not walked here.
        const res = await call(method, fill(w, path), { ...bodyFor(op), token });
        sent++;
        if (res.status !== 403 || res.json?.error?.code !== "forbidden") {
          problems.push(`${name}: ${method} ${path} → ${res.status} ${JSON.stringify(res.json).slice(0, 160)}`);
        }
      }
      if (host) {
        for (const token of [ADMIN, w.token.token]) {
          const res = await call(method, fill(w, path), { ...bodyFor(op), token });
          sent++;
          if (res.status !== 403) problems.push(`operator token: ${method} ${path} → ${res.status}`);
        }
      }
    }
    expect(problems).toEqual([]);
    expect(await fingerprint(w), "a refused request changed something").toBe(before);
    expect(sent).toBeGreaterThan(1000);
    console.info(`wrong credentials: ${sent} requests over ${ops.length} operations, all refused`);
  }, 240_000);

  it("refuses enrollment with every token but an enrollment token (401), creating no server", async () => {
    const before = await fingerprint(w);
    const body = { hostname: `${uniq("e")}.example.com`, machine_id: uniq("m"), boot_id: "b" };
    for (const [name, token] of [
      ...Object.entries(wrong).map(([n, who]) => [n, who.token] as const),
      ["admin", ADMIN],
      ["server token", w.server.token],
    ] as const) {
      if (name === "enrollment token") continue;
      const res = await call("POST", "/v1/agent/enroll", { token, body });
      expect([name, res.status, res.json.error?.code]).toEqual([name, 401, "unauthorized"]);
    }
    expect(await fingerprint(w)).toBe(before);
  });

  it("refuses operator, server and enrollment tokens in the FleetLock key's place, with or without a bearer (403)", async () => {
    const ops = (await operations()).filter((o) => o.path.startsWith("/fleetlock/"));
    expect(ops).toHaveLength(4);
    const before = await fingerprint(w);
    const body = JSON.stringify({ client_params: { id: "walk-node", group: "default" } });
    let sent = 0;
    for (const { path } of ops) {
      for (const key of [ADMIN, w.token.token, w.server.token, w.enrollment.token, "k".repeat(43), ""]) {
        for (const bearer of [null, ADMIN]) {
          const res = await call("POST", fill(w, path, { key: encodeURIComponent(key) }), {
            token: bearer,
            rawBody: body,
            headers: { "fleet-lock-protocol": "true" },
          });
          sent++;
          const where = `${path} key=${key.slice(0, 8)}… bearer=${bearer !== null}`;
          // An empty key leaves no such endpoint at all (404); every other key is refused as the wrong one.
          expect([where, res.status], JSON.stringify(res.json)).toEqual([where, key === "" ? 404 : 403]);
          expect(errorShapeProblem(path, res.json), where).toBeNull();
        }
      }
    }
    expect(await fingerprint(w)).toBe(before);
    expect(sent).toBe(48);
  });
});
