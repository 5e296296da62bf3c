/**
 * Access per fleet, over every route the OpenAPI document lists and every console page the app
 * serves (both enumerated, so routes added later are covered without touching this file): a token
 * of fleet A reaches and counts nothing of fleet B, a fleet outside its list answers exactly as a
 * missing one, and no refused request changes anything (D1 and B's objects compared before and
 * after). The same walk runs for a Cloudflare Access user mapped to A only, whose principal comes
 * from the JWT on each request, and a verified user no mapping names is refused everywhere.
 */
import { env } from "cloudflare:test";
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import { exportJWK, generateKeyPair, SignJWT, type CryptoKey, type JWK } from "jose";
import { createApp } from "../src/app";
import { BASE, call, createFleet, uniq } from "./helpers";
import { consoleFetch, cookiesOf, SESSION, signIn } from "./console-helpers";
import { AGENT, fleetWithAgent, startRollout } from "./rollout-helpers";

interface Token {
  id: string;
  token: string;
}

/** Who sends a request: a bearer token, or an Access user whose JWT rides on every request. */
interface Caller {
  token: string | null;
  headers?: Record<string, string>;
}

/** What fleet B has, named everywhere a leak could show it. */
interface World {
  a: string;
  b: string;
  aServer: string;
  bServer: string;
  bHostname: string;
  bRollout: string;
  bWebhook: string;
  bEnrollment: string;
  tA: Token;
  tB: Token;
  tStar: Token;
  /** An Access user whose group is mapped (admin) to fleet A only, and one no mapping names. */
  ssoA: Caller;
  ssoNone: Caller;
  ssoAJwt: string;
  ssoNoneJwt: string;
  /** A fleet name that exists nowhere. */
  missing: string;
}

const B_ONLY_AGENT = "bonly-agent";
let w: World;

async function token(body: Record<string, unknown>): Promise<Token> {
  const res = await call("POST", "/v1/tokens", { body: { name: uniq("tok"), scope: "admin", ...body } });
  if (res.status !== 201) throw new Error(JSON.stringify(res.json));
  return res.json;
}

// Cloudflare Access as the tests' worker is configured for it (vitest.config.ts): the team's keys
// are published by this test at the team's certs address.
const ISSUER = "https://hm-test.cloudflareaccess.com";
const CERTS = `${ISSUER}/cdn-cgi/access/certs`;
const AUD = "test-access-aud";

async function accessJwt(claims: Record<string, unknown>) {
  const now = Math.floor(Date.now() / 1000);
  // Valid for the whole file: the walks take minutes, and an expiry mid-walk would read as a refusal.
  return new SignJWT({ sub: crypto.randomUUID(), ...claims })
    .setProtectedHeader({ alg: "RS256", kid: accessKey.kid })
    .setIssuer(ISSUER)
    .setAudience(AUD)
    .setIssuedAt(now - 5)
    .setNotBefore(now - 5)
    .setExpirationTime(now + 3600)
    .sign(accessKey.privateKey);
}

let accessKey: { kid: string; privateKey: CryptoKey; jwk: JWK };
const realFetch = globalThis.fetch;

beforeAll(async () => {
  const { privateKey, publicKey } = await generateKeyPair("RS256", { extractable: true });
  const kid = uniq("kid");
  accessKey = { kid, privateKey, jwk: { ...(await exportJWK(publicKey)), kid, alg: "RS256", use: "sig" } };
  vi.spyOn(globalThis, "fetch").mockImplementation(async (input, init) => {
    const url = input instanceof Request ? input.url : String(input);
    if (url === CERTS) return Response.json({ keys: [accessKey.jwk] });
    return realFetch(input, init);
  });
});

afterAll(() => vi.restoreAllMocks());

beforeAll(async () => {
  const A = await fleetWithAgent(1);
  const B = await fleetWithAgent(1);
  // An agent only B runs: a count of it anywhere A looks would be B's.
  const bHost = B.hosts[0];
  const put = await call("PUT", `/v1/servers/${bHost.id}/desired`, {
    body: {
      generation: 3,
      agents: [
        { name: AGENT, image: "registry.example/fw:1.0.0", version: "1.0.0" },
        { name: B_ONLY_AGENT, image: "registry.example/bonly:1", version: "1" },
      ],
    },
  });
  expect([200, 201]).toContain(put.status);
  const rollout = await startRollout({ fleet: B.fleet });
  const hook = await call("POST", `/v1/fleets/${B.fleet}/webhooks`, {
    body: { url: "https://hooks.example.com/b", events: ["server.stale"] },
  });
  expect(hook.status).toBe(201);
  const enroll = await call("POST", `/v1/fleets/${B.fleet}/enrollment-tokens`, {
    body: { expires_at: new Date(Date.now() + 86400_000).toISOString() },
  });
  expect(enroll.status).toBe(201);
  expect(enroll.json.id).toBeTruthy();
  const groupA = uniq("team-a");
  const mapped = await call("POST", "/v1/sso/mappings", {
    body: { kind: "group", value: groupA, scope: "admin", fleets: [A.fleet] },
  });
  expect(mapped.status).toBe(201);
  const ssoAJwt = await accessJwt({ email: `${uniq("ana")}@example.com`, groups: [groupA] });
  const ssoNoneJwt = await accessJwt({ email: `${uniq("zed")}@example.com`, groups: [uniq("unmapped")] });
  // A user of B signed in to the console: a live session that A's lists must not show.
  const groupB = uniq("team-b");
  expect(
    (
      await call("POST", "/v1/sso/mappings", {
        body: { kind: "group", value: groupB, scope: "read", fleets: [B.fleet] },
      })
    ).status,
  ).toBe(201);
  const bUser = await accessJwt({ email: `${uniq("bea")}@example.com`, groups: [groupB] });
  expect((await consoleFetch("/console", { cookie: `CF_Authorization=${bUser}` })).status).toBe(303);
  const viaAccess = (jwt: string): Caller => ({ token: null, headers: { "Cf-Access-Jwt-Assertion": jwt } });
  w = {
    a: A.fleet,
    b: B.fleet,
    aServer: A.hosts[0].id,
    bServer: bHost.id,
    bHostname: bHost.hostname,
    bRollout: rollout.id,
    bWebhook: hook.json.webhook.id,
    bEnrollment: enroll.json.id,
    tA: await token({ fleets: [A.fleet] }),
    tB: await token({ fleets: [B.fleet] }),
    tStar: await token({ fleets: "*" }),
    ssoA: viaAccess(ssoAJwt),
    ssoNone: viaAccess(ssoNoneJwt),
    ssoAJwt,
    ssoNoneJwt,
    missing: uniq("missing"),
  };
});

/** Everything that names B: none of it may appear in an answer to A's token. */
const secretsOfB = () => [w.b, w.bServer, w.bHostname, w.bRollout, w.bWebhook, w.bEnrollment, w.tB.id, B_ONLY_AGENT];

/** Whole names only: "f-x-1" is not in "f-x-12". */
const names = (text: string, s: string) =>
  new RegExp(`(?<![A-Za-z0-9-])${s.replace(/[.*+?^${}()|[\]\\]/g, "\\$&")}(?![A-Za-z0-9-])`).test(text);

/**
 * B's names in an answer, except those the request itself sent: "fleet 'x' does not exist" only
 * repeats what the caller said (and that it is said exactly as for a missing fleet is checked apart).
 */
const leaks = (text: string, sent = "") => secretsOfB().filter((s) => names(text, s) && !names(sent, s));

/** The path of an operation with B's names in it (or, with `missing`, names that exist nowhere). */
function fill(path: string, missing = false): string {
  const fleet = missing ? w.missing : w.b;
  const none = NONE;
  const idFor = (p: string) => {
    if (p.startsWith("/v1/fleets/{fleet}/webhooks")) return missing ? none : w.bWebhook;
    if (p.startsWith("/v1/fleets/{fleet}/enrollment-tokens")) return missing ? none : w.bEnrollment;
    if (p.startsWith("/v1/fleets/{id}")) return fleet;
    if (p.startsWith("/v1/servers/")) return missing ? none : w.bServer;
    if (p.startsWith("/v1/rollouts/")) return missing ? none : w.bRollout;
    if (p.startsWith("/v1/tokens/")) return missing ? none : w.tB.id;
    return none;
  };
  return path
    .replace("{fleet}", fleet)
    .replace("{id}", idFor(path))
    .replace("{server}", missing ? none : w.bServer)
    .replace("{group}", "default")
    .replace("{agent}", AGENT)
    .replace("{role}", "web")
    .replace("{key}", "k".repeat(43))
    .replace("{target}", "linux-amd64")
    .replace("{file}", "harbormaster-agent-linux-amd64")
    .replace("{part}", "1");
}

/** Queries and bodies that point at B where an operation names its fleet or server outside the path. */
function extras(op: { parameters?: { name: string; in: string }[] }, path: string, method: string) {
  const query = new URLSearchParams();
  for (const p of op.parameters ?? []) {
    if (p.in !== "query") continue;
    if (p.name === "fleet") query.set("fleet", w.b);
    if (p.name === "server") query.set("server", w.bServer);
    if (p.name === "target") query.set("target", `fleet:${w.b}`);
  }
  const bodies: Record<string, unknown> = {
    "post /v1/servers": { fleet: w.b, hostname: `${uniq("x")}.example.com`, kind: "managed" },
    "post /v1/rollouts": { fleet: w.b, agent: AGENT, image: "registry.example/fw:3.0.0", version: "3.0.0" },
    "post /v1/tokens": { name: "escape", scope: "read", fleets: [w.b] },
    "post /v1/fleets": { id: w.b },
    "post /v1/check/server-agents/fix": { fleet: w.b, dry_run: false },
  };
  const body = bodies[`${method} ${path}`] ?? (["post", "put", "patch"].includes(method) ? {} : undefined);
  return { query: query.toString(), body };
}

/** D1 as rows, and B's objects as their own answers: what a refused request must leave as it was. */
async function fingerprint() {
  const tables = await env.DB.prepare(
    "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' AND name NOT LIKE '_cf_%' AND name != 'd1_migrations' ORDER BY name",
  ).all<{ name: string }>();
  const rows: Record<string, unknown> = {};
  for (const { name } of tables.results) {
    rows[name] = (await env.DB.prepare(`SELECT * FROM "${name}"`).all()).results;
  }
  const objects = await Promise.all(
    [
      `/v1/servers/${w.bServer}`,
      `/v1/fleets/${w.b}/spec`,
      `/v1/fleets/${w.b}/reboot-groups`,
      `/v1/rollouts/${w.bRollout}`,
      `/v1/fleets/${w.b}/webhooks`,
    ].map(async (p) => {
      const res = await call("GET", p);
      // The heartbeat and the computed staleness move by themselves; the rest must not.
      return JSON.stringify(res.json, (k, v) => (k === "last_seen" || k === "stale_at" ? undefined : v));
    }),
  );
  return JSON.stringify({ rows, objects });
}

const withoutRequestId = (json: any) => {
  if (json?.error) delete json.error.request_id;
  return json;
};

const NONE = "00000000-0000-4000-8000-000000000000";

/** An answer with B's names and the missing ones made alike, and no request id. */
function normalized(json: unknown) {
  let text = JSON.stringify(withoutRequestId(json));
  for (const s of [w.b, w.missing]) text = text.replaceAll(s, "<fleet>");
  for (const s of [w.bServer, w.bRollout, w.bWebhook, w.bEnrollment, w.tB.id, NONE]) text = text.replaceAll(s, "<id>");
  return JSON.parse(text);
}

async function operations() {
  const doc = (await call("GET", "/openapi.json", { token: null })).json;
  const ops: { method: string; path: string; op: any }[] = [];
  for (const [path, item] of Object.entries<Record<string, any>>(doc.paths)) {
    for (const [method, op] of Object.entries<any>(item)) {
      if (["get", "post", "put", "patch", "delete"].includes(method)) ops.push({ method, path, op });
    }
  }
  return ops;
}

async function send(method: string, path: string, query: string, body: unknown, who: Caller) {
  return call(method.toUpperCase(), `${path}${query ? `?${query}` : ""}`, {
    token: who.token,
    headers: who.headers,
    body,
  });
}

/**
 * Every operation with B's names, sent as a caller of fleet A: nothing of B in any answer, B
 * answered exactly as a missing fleet or id, and a refused write changes nothing.
 */
async function walkAsA(who: Caller, label: string) {
  const ops = await operations();
  expect(ops.length).toBeGreaterThan(80);
  const refusedWithPathFleet: string[] = [];
  const comparedWithStar: string[] = [];
  const otherWords: string[] = [];
  for (const { method, path, op } of ops) {
    const where = `${method.toUpperCase()} ${path}`;
    const { query, body } = extras(op, path, method);
    const reading = method === "get";
    const before = reading ? null : await fingerprint();
    const res = await send(method, fill(path), query, body, who);
    const text = JSON.stringify(res.json);
    const sent = `${fill(path)}?${query} ${JSON.stringify(body ?? null)}`;
    expect(leaks(text, sent), `${where} answered A with B's names: ${text.slice(0, 300)}`).toEqual([]);
    if (!reading && res.status >= 400) {
      expect(await fingerprint(), `${where} was refused (${res.status}) but changed something`).toBe(before);
    }
    const fleetPath = path.includes("{fleet}") && path.startsWith("/v1/") && !path.startsWith("/v1/agent");
    const byId = /^\/v1\/(servers|rollouts|tokens)\/\{id\}/.test(path) || path === "/v1/fleets/{id}";
    if (fleetPath || byId) {
      // B, outside A's list, is answered exactly as what exists nowhere: same status, same body.
      if (fleetPath) expect(res.status, `${where}: ${text}`).toBe(404);
      else expect(res.status, `${where}: ${text}`).toBeGreaterThanOrEqual(400);
      const missingQuery = query.replaceAll(w.b, w.missing).replaceAll(w.bServer, NONE);
      const missing = await send(method, fill(path, true), missingQuery, body, who);
      expect(missing.status, where).toBe(res.status);
      expect(normalized(res.json), where).toEqual(normalized(missing.json));
      // And as the * token is answered for that missing fleet or id, when that is a 404 too.
      const star = await send(method, fill(path, true), missingQuery, body, w.tStar);
      if (star.status === 404 && res.status === 404) {
        // The same code; the words may be the route's own ("channel 'x/agent' does not exist"
        // for a missing fleet), which says nothing more: A is answered alike for B and for none.
        expect(star.json.error.code, `${where} for *`).toBe(res.json.error.code);
        comparedWithStar.push(where);
        if (JSON.stringify(normalized(star.json)) !== JSON.stringify(normalized(res.json))) {
          otherWords.push(`${where}: ${normalized(star.json).error.message}`);
        }
      }
      refusedWithPathFleet.push(where);
    }
  }
  expect(comparedWithStar.length).toBeGreaterThan(20);
  console.info(
    `access isolation (${label}): ${ops.length} operations, ${refusedWithPathFleet.length} naming B compared with a missing ` +
      `fleet or id, ${comparedWithStar.length} also with the * token (${otherWords.length} in the route's own words)`,
  );
  expect(refusedWithPathFleet.length).toBeGreaterThan(30);
}

describe("access per fleet over every route of the OpenAPI document", () => {
  it("lets a token of fleet A reach nothing of B, answer B as a missing fleet, and change nothing", async () => {
    await walkAsA(w.tA, "token of A");
  }, 180_000);

  it("lets an Access user mapped to A only reach nothing of B, answer B as missing, and change nothing", async () => {
    // The principal is the JWT's, verified on each request: no session row stands in for it.
    const who = await call("GET", "/v1/fleets?limit=500", w.ssoA);
    expect(who.json.items.map((f: { id: string }) => f.id)).toEqual([w.a]);
    await walkAsA(w.ssoA, "Access user mapped to A");
  }, 180_000);

  it("refuses an Access user no mapping names on every operator route, 403, and changes nothing", async () => {
    const ops = await operations();
    const before = await fingerprint();
    let refused = 0;
    for (const { method, path, op } of ops) {
      const where = `${method.toUpperCase()} ${path}`;
      const { query, body } = extras(op, path, method);
      // With B in the path, and with the fleet the user's group would have had if it were mapped.
      const paths = path.includes("{fleet}") ? [fill(path), fill(path.replace("{fleet}", w.a))] : [fill(path)];
      for (const p of paths) {
        // A request well formed for its route, so that only who sends it can be refused.
        const bytes =
          op.requestBody?.content?.["application/octet-stream"] && !op.requestBody.content["application/json"];
        const res = bytes
          ? await call(method.toUpperCase(), `${p}${query ? `?${query}` : ""}`, {
              token: null,
              headers: { ...w.ssoNone.headers, "Content-Type": "application/octet-stream" },
              rawBody: "bytes",
            })
          : await send(method, p, query, body, w.ssoNone);
        const text = JSON.stringify(res.json);
        expect(leaks(text, `${p}?${query} ${JSON.stringify(body ?? null)}`), `${where}: ${text.slice(0, 300)}`).toEqual(
          [],
        );
        // Public routes (health, the agent's download, FleetLock's per-fleet key, the CLI's sign-in
        // start) and the hosts' own routes do not take an operator; every other one refuses the user.
        const open = (op.security ?? []).length === 0 || path.startsWith("/v1/agent/");
        if (open) continue;
        expect([where, res.status, res.json?.error?.code], text).toEqual([where, 403, "forbidden"]);
        expect(res.json.error.message, where).toContain("no SSO mapping");
        refused++;
      }
    }
    expect(await fingerprint(), "a refused request changed something").toBe(before);
    expect(refused).toBeGreaterThan(100);
    console.info(`access isolation (Access user of no group): ${refused} requests refused with 403`);
  }, 180_000);

  it("still lets B's own token and the * token reach B (the refusals above are about A alone)", async () => {
    for (const tok of [w.tB, w.tStar]) {
      expect((await call("GET", `/v1/servers/${w.bServer}`, { token: tok.token })).status).toBe(200);
      expect((await call("GET", `/v1/rollouts/${w.bRollout}`, { token: tok.token })).status).toBe(200);
      expect((await call("GET", `/v1/fleets/${w.b}/webhooks/${w.bWebhook}`, { token: tok.token })).status).toBe(200);
      const list = await call("GET", "/v1/servers?limit=500", { token: tok.token });
      expect(JSON.stringify(list.json)).toContain(w.bServer);
      const metrics = await call("GET", "/metrics", { token: tok.token });
      expect(String(metrics.json)).toContain(B_ONLY_AGENT);
    }
  });

  it("counts only A's servers and instances for A: status, metrics and lists", async () => {
    const status = await call("GET", "/v1/status", { token: w.tA.token });
    expect(status.json.fleets.map((f: { id: string }) => f.id)).toEqual([w.a]);
    const metrics = String((await call("GET", "/metrics", { token: w.tA.token })).json);
    const fleetsNamed = new Set([...metrics.matchAll(/fleet="([^"]+)"/g)].map((m) => m[1]));
    expect([...fleetsNamed]).toEqual([w.a]);
    const agents = [...metrics.matchAll(/^harbormaster_agent_instances\{agent="([^"]+)",status="[^"]+"\} (\d+)$/gm)];
    const total = agents.reduce((n, m) => n + Number(m[2]), 0);
    const instances = await call("GET", `/v1/instances?limit=500`, { token: w.tA.token });
    expect(total).toBe(instances.json.items.length);
    expect(new Set(instances.json.items.map((i: { fleet: string }) => i.fleet))).toEqual(new Set([w.a]));
    const fleets = await call("GET", "/v1/fleets?limit=500", { token: w.tA.token });
    expect(fleets.json.items.map((f: { id: string }) => f.id)).toEqual([w.a]);
    const audit = await call("GET", "/v1/audit?limit=500", { token: w.tA.token });
    expect(audit.json.items.length).toBeGreaterThan(0);
    expect(leaks(JSON.stringify(audit.json))).toEqual([]);
    const tokens = await call("GET", "/v1/tokens?limit=500", { token: w.tA.token });
    expect(tokens.json.items.map((t: { id: string }) => t.id)).toContain(w.tA.id);
    expect(tokens.json.items.every((t: { fleets: unknown }) => JSON.stringify(t.fleets) === JSON.stringify([w.a])));
  });

  it("keeps a fleet-limited admin's SSO mappings within its fleets: no \"*\", no B, B's not seen", async () => {
    const ofB = await call("POST", "/v1/sso/mappings", {
      body: { kind: "group", value: uniq("team-b"), scope: "admin", fleets: [w.b] },
    });
    expect(ofB.status).toBe(201);
    const before = await fingerprint();
    for (const fleets of ["*", [w.b], [w.a, w.b]]) {
      const res = await call("POST", "/v1/sso/mappings", {
        token: w.tA.token,
        body: { kind: "email", value: `${uniq("me")}@example.com`, scope: "admin", fleets },
      });
      expect([JSON.stringify(fleets), res.status, res.json.error?.code]).toEqual([
        JSON.stringify(fleets),
        403,
        "forbidden",
      ]);
    }
    const del = await call("DELETE", `/v1/sso/mappings/${ofB.json.id}`, { token: w.tA.token });
    expect(del.status).toBe(404);
    expect(await fingerprint()).toBe(before);
    const list = await call("GET", "/v1/sso/mappings", { token: w.tA.token });
    expect(list.json.items.length).toBeGreaterThan(0);
    expect(list.json.items.every((m: { fleets: unknown }) => JSON.stringify(m.fleets) === JSON.stringify([w.a]))).toBe(
      true,
    );
    expect(leaks(JSON.stringify(list.json))).toEqual([]);
    const own = await call("POST", "/v1/sso/mappings", {
      token: w.tA.token,
      body: { kind: "email", value: `${uniq("me")}@example.com`, scope: "write", fleets: [w.a] },
    });
    expect(own.status).toBe(201);
  });

  it("answers a scoped token's hostname reference within its own fleets only", async () => {
    const other = await createFleet();
    const res = await call("GET", `/v1/servers/${encodeURIComponent(w.bHostname)}`, { token: w.tA.token });
    expect(res.status).toBe(404);
    const missing = await call("GET", `/v1/servers/nobody-${other.id}.example.com`, { token: w.tA.token });
    expect(withoutRequestId(res.json)).toEqual(
      JSON.parse(
        JSON.stringify(withoutRequestId(missing.json)).replaceAll(`nobody-${other.id}.example.com`, w.bHostname),
      ),
    );
    expect(leaks(JSON.stringify(res.json), w.bHostname)).toEqual([]);
  });
});

/** Every GET page of the console, from the app's own route table. */
function consolePages() {
  const seen = new Set<string>();
  for (const r of createApp().routes) {
    if (r.method !== "GET" || !r.path.startsWith("/console") || r.path.includes("*")) continue;
    if (/sign-in|live|assets|\.(js|css)$/.test(r.path)) continue;
    seen.add(r.path);
  }
  return [...seen];
}

/** Every console page as a signed-in user of A: nothing of B, and B shown as a missing fleet is. */
async function walkConsoleAsA(cookie: string) {
  const pages = consolePages();
  expect(pages.length).toBeGreaterThan(6);
  for (const p of pages) {
    // A parameter with its pattern (`:id{[0-9a-f-]{36}}`, one level of braces inside) or without.
    const path = pagePath(p);
    for (const q of ["", `?fleet=${w.b}`]) {
      const res = await consoleFetch(`${path}${q}`, { cookie });
      const html = await res.text();
      expect(leaks(html, `${path}${q}`), `${path}${q} (${res.status})`).toEqual([]);
      if (q) {
        // B is shown as a fleet that does not exist is.
        const missing = await consoleFetch(`${path}?fleet=${w.missing}`, { cookie });
        expect(res.status, `${path}${q}`).toBe(missing.status);
      }
    }
  }
}

/** A console route with B's names for its parameters. */
function pagePath(p: string) {
  const path = p.replace(/:(\w+)(\{(?:[^{}]|\{[^{}]*\})*\})?/g, (_, name: string) =>
    name === "group" ? "default" : p.startsWith("/console/rollouts") ? w.bRollout : w.bServer,
  );
  expect(path, p).not.toMatch(/[:{}]/);
  return path;
}

describe("access per fleet in the console", () => {
  it("shows a token of A nothing of B on any page, with or without ?fleet= naming B", async () => {
    const { cookie } = await signIn(w.tA.token);
    await walkConsoleAsA(cookie);
  }, 120_000);

  it("shows an Access user mapped to A only nothing of B on any page", async () => {
    const first = await consoleFetch("/console", { cookie: `CF_Authorization=${w.ssoAJwt}` });
    expect(first.status).toBe(303);
    const cookie = `${SESSION}=${cookiesOf(first)[SESSION].value}`;
    const home = await consoleFetch("/console", { cookie });
    expect(home.status).toBe(200);
    expect(leaks(await home.text())).toEqual([]);
    await walkConsoleAsA(cookie);
  }, 120_000);

  it("refuses an Access user no mapping names on every console page, with no session", async () => {
    const before = await fingerprint();
    const pages = consolePages();
    for (const p of pages) {
      // The OpenID Connect entry and callback are sign-in pages: open to anyone, as the form is.
      if (/^\/console\/sso(\/|$)/.test(p)) continue;
      const res = await consoleFetch(pagePath(p), { cookie: `CF_Authorization=${w.ssoNoneJwt}` });
      const html = await res.text();
      expect(res.status, p).toBe(403);
      expect(html, p).toContain("no SSO mapping");
      expect(leaks(html), p).toEqual([]);
      expect(cookiesOf(res)[SESSION], p).toBeUndefined();
    }
    expect(await fingerprint()).toBe(before);
  });

  it("refuses A's live socket on B's feed as it refuses an unknown fleet's", async () => {
    const { cookie } = await signIn(w.tA.token);
    const live = (fleet: string) =>
      consoleFetch(`/console/live?fleet=${fleet}`, { cookie, headers: { Upgrade: "websocket", Origin: BASE } });
    // The same session's socket on its own fleet opens: the refusals below are the fleet's alone.
    const own = await live(w.a);
    expect(own.status).toBe(101);
    own.webSocket?.accept();
    own.webSocket?.close();
    const answers = [];
    for (const fleet of [w.b, w.missing]) {
      const res = await live(fleet);
      expect(res.status, fleet).toBe(404);
      answers.push(await res.text());
      res.webSocket?.close();
    }
    expect(answers[0]).toBe(answers[1]);
  });
});
