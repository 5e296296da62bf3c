/**
 * Access per fleet, over every route the OpenAPI document lists and every console page the app
 * serves (both enumerated, so routes added later are covered without touching this file): a token
 * of fleet A reaches and counts nothing of fleet B, a fleet outside its list answers exactly as a
 * missing one, and no refused request changes anything (D1 and B's objects compared before and
 * after).
 */
import { env } from "cloudflare:test";
import { beforeAll, describe, expect, it } from "vitest";
import { createApp } from "../src/app";
import { BASE, call, createFleet, uniq } from "./helpers";
import { consoleFetch, signIn } from "./console-helpers";
import { AGENT, fleetWithAgent, startRollout } from "./rollout-helpers";

interface Token {
  id: string;
  token: string;
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

async function send(method: string, path: string, query: string, body: unknown, tok: Token) {
  return call(method.toUpperCase(), `${path}${query ? `?${query}` : ""}`, { token: tok.token, body });
}

describe("access per fleet over every route of the OpenAPI document", () => {
  it("lets a token of fleet A reach nothing of B, answer B as a missing fleet, and change nothing", async () => {
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
      const res = await send(method, fill(path), query, body, w.tA);
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
        const missing = await send(method, fill(path, true), missingQuery, body, w.tA);
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
      `access isolation: ${ops.length} operations, ${refusedWithPathFleet.length} naming B compared with a missing ` +
        `fleet or id, ${comparedWithStar.length} also with the * token (${otherWords.length} in the route's own words)`,
    );
    expect(refusedWithPathFleet.length).toBeGreaterThan(30);
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

describe("access per fleet in the console", () => {
  it("shows a token of A nothing of B on any page, with or without ?fleet= naming B", async () => {
    const { cookie } = await signIn(w.tA.token);
    const pages = consolePages();
    expect(pages.length).toBeGreaterThan(6);
    for (const p of pages) {
      // A parameter with its pattern (`:id{[0-9a-f-]{36}}`, one level of braces inside) or without.
      const path = p.replace(/:(\w+)(\{(?:[^{}]|\{[^{}]*\})*\})?/g, (_, name: string) =>
        name === "group" ? "default" : p.startsWith("/console/rollouts") ? w.bRollout : w.bServer,
      );
      expect(path, p).not.toMatch(/[:{}]/);
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
  }, 120_000);

  it("refuses A's live socket on B's feed as it refuses an unknown fleet's", async () => {
    const { cookie } = await signIn(w.tA.token);
    for (const fleet of [w.b, w.missing]) {
      const res = await consoleFetch(`/console/live?fleet=${fleet}`, {
        cookie,
        headers: { Upgrade: "websocket", Origin: BASE },
      });
      expect(res.status, fleet).toBe(404);
      res.webSocket?.close();
    }
  });
});
