import { env } from "cloudflare:test";
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import { exportJWK, generateKeyPair, SignJWT, type CryptoKey, type JWK } from "jose";
import { call, createFleet, uniq } from "./helpers";
import { consoleFetch, cookiesOf, SESSION } from "./console-helpers";

const ISSUER = "https://hm-test.cloudflareaccess.com";
const CERTS = `${ISSUER}/cdn-cgi/access/certs`;
const AUD = "test-access-aud";

/** The team's keys as the test publishes them at CERTS; `published` is what the next fetch answers. */
let published: JWK[] = [];
let certFetches = 0;
const realFetch = globalThis.fetch;

interface Key {
  kid: string;
  privateKey: CryptoKey;
  jwk: JWK;
}

async function newKey(kid: string): Promise<Key> {
  const { privateKey, publicKey } = await generateKeyPair("RS256", { extractable: true });
  return { kid, privateKey, jwk: { ...(await exportJWK(publicKey)), kid, alg: "RS256", use: "sig" } };
}

async function assertion(
  key: Key,
  claims: Record<string, unknown>,
  opts: { aud?: string; iss?: string; exp?: number } = {},
) {
  const now = Math.floor(Date.now() / 1000);
  return new SignJWT({ sub: crypto.randomUUID(), ...claims })
    .setProtectedHeader({ alg: "RS256", kid: key.kid })
    .setIssuer(opts.iss ?? ISSUER)
    .setAudience(opts.aud ?? AUD)
    .setIssuedAt(now - 5)
    .setNotBefore(now - 5)
    .setExpirationTime(opts.exp ?? now + 600)
    .sign(key.privateKey);
}

const asUser = (jwt: string) => ({ token: null, headers: { "Cf-Access-Jwt-Assertion": jwt } });

let current: Key;
let fleetA: string;
let fleetB: string;
const group = uniq("team-a");

beforeAll(async () => {
  current = await newKey(uniq("kid"));
  published = [current.jwk];
  vi.spyOn(globalThis, "fetch").mockImplementation(async (input, init) => {
    const url = input instanceof Request ? input.url : String(input);
    if (url === CERTS) {
      certFetches++;
      return Response.json({ keys: published });
    }
    return realFetch(input, init);
  });
  fleetA = (await createFleet()).id;
  fleetB = (await createFleet()).id;
  const mapped = await call("POST", "/v1/sso/mappings", {
    body: { kind: "group", value: group, scope: "write", fleets: [fleetA] },
  });
  expect(mapped.status).toBe(201);
});

afterAll(() => vi.restoreAllMocks());

describe("Cloudflare Access sign-in", () => {
  it("maps a verified user's group to its scope and fleets", async () => {
    const jwt = await assertion(current, { email: "Ana@Example.com", groups: [group] });
    expect((await call("GET", `/v1/fleets/${fleetA}`, asUser(jwt))).status).toBe(200);
    // A fleet outside the mapping is missing, as for a token limited to fleets; lists leave it out.
    expect((await call("GET", `/v1/fleets/${fleetB}`, asUser(jwt))).status).toBe(404);
    const list = await call("GET", "/v1/fleets?limit=500", asUser(jwt));
    expect(list.json.items.map((f: { id: string }) => f.id)).toEqual([fleetA]);
    // "write" from the mapping: an admin route is refused.
    const admin = await call("POST", "/v1/sso/mappings", {
      ...asUser(jwt),
      body: { kind: "email", value: "x@y.z", scope: "read", fleets: "*" },
    });
    expect(admin.status).toBe(403);
    expect(admin.json.error.message).toContain("scope 'admin'");
  });

  it("carries the mapping's fleets: a token the user creates is limited to them, and expires with the user's", async () => {
    const admins = uniq("admins-a");
    expect(
      (
        await call("POST", "/v1/sso/mappings", {
          body: { kind: "group", value: admins, scope: "admin", fleets: [fleetA] },
        })
      ).status,
    ).toBe(201);
    const exp = Math.floor(Date.now() / 1000) + 900;
    const jwt = await assertion(current, { email: "lead@example.com", groups: [admins, group] }, { exp });
    const outside = await call("POST", "/v1/tokens", {
      ...asUser(jwt),
      body: { name: "ci", scope: "read", fleets: [fleetB] },
    });
    expect(outside.status).toBe(403);
    const own = await call("POST", "/v1/tokens", { ...asUser(jwt), body: { name: "ci", scope: "read" } });
    expect(own.status).toBe(201);
    expect(own.json.fleets).toEqual([fleetA]);
    expect(Date.parse(own.json.expires_at)).toBe(exp * 1000);
    expect(own.json.created_by).toBe("access:lead@example.com");
  });

  it("records what an Access user did under their email", async () => {
    const email = `${uniq("bo")}@example.com`;
    const mapped = await call("POST", "/v1/sso/mappings", {
      body: { kind: "email", value: email, scope: "write", fleets: "*" },
    });
    expect(mapped.status).toBe(201);
    const jwt = await assertion(current, { email: email.toUpperCase() });
    const id = uniq("acc");
    expect((await call("POST", "/v1/fleets", { ...asUser(jwt), body: { id } })).status).toBe(201);
    const audit = await call("GET", `/v1/audit?target=fleet:${id}`);
    expect(audit.json.items[0].actor).toBe(`access:${email}`);
  });

  it("refuses expired, wrong-audience, wrong-issuer, unsigned and re-signed assertions with 401", async () => {
    const claims = { email: "ana@example.com", groups: [group] };
    const past = Math.floor(Date.now() / 1000) - 60;
    const other = await newKey(current.kid); // same kid, another key: a forgery
    const good = await assertion(current, claims);
    const [header, payload] = good.split(".");
    const unsigned = `${btoa(JSON.stringify({ alg: "none", typ: "JWT" })).replace(/=+$/, "")}.${payload}.`;
    const cases: Record<string, string> = {
      expired: await assertion(current, claims, { exp: past }),
      audience: await assertion(current, claims, { aud: "another-app" }),
      issuer: await assertion(current, claims, { iss: "https://evil.cloudflareaccess.com" }),
      unsigned,
      resigned: await assertion(other, claims),
      tampered: `${header}.${btoa(JSON.stringify({ ...JSON.parse(atob(payload.replace(/-/g, "+").replace(/_/g, "/"))), groups: ["admins"] })).replace(/=+$/, "")}.${good.split(".")[2]}`,
      garbage: "not-a-jwt",
    };
    for (const [name, jwt] of Object.entries(cases)) {
      const res = await call("GET", `/v1/fleets/${fleetA}`, asUser(jwt));
      expect([name, res.status, res.json.error.code]).toEqual([name, 401, "unauthorized"]);
    }
  });

  it("refuses a verified user that no mapping names: 403 with a message that says so", async () => {
    const jwt = await assertion(current, { email: "nobody@example.com", groups: ["unmapped"] });
    const res = await call("GET", "/v1/fleets", asUser(jwt));
    expect(res.status).toBe(403);
    expect(res.json.error.message).toContain("no SSO mapping");
    expect(res.json.error.message).toContain("nobody@example.com");
  });

  it("fetches the team's keys once and refetches once when Access rotates its key", async () => {
    const jwt = await assertion(current, { email: "ana@example.com", groups: [group] });
    const before = certFetches;
    for (let i = 0; i < 3; i++) expect((await call("GET", `/v1/fleets/${fleetA}`, asUser(jwt))).status).toBe(200);
    expect(certFetches - before).toBe(0);

    // Rotation: a new key signs; the old one stays published. Past jose's cooldown, one refetch.
    const next = await newKey(uniq("kid"));
    published = [next.jwk, current.jwk];
    vi.useFakeTimers({ toFake: ["Date"], now: Date.now() + 31_000 });
    try {
      const rotated = await assertion(
        next,
        { email: "ana@example.com", groups: [group] },
        { exp: Math.floor(Date.now() / 1000) + 600 },
      );
      for (let i = 0; i < 3; i++) expect((await call("GET", `/v1/fleets/${fleetA}`, asUser(rotated))).status).toBe(200);
      expect(certFetches - before).toBe(1);
    } finally {
      vi.useRealTimers();
    }
  });

  it("takes a bearer token over an Access assertion", async () => {
    const jwt = await assertion(current, { email: "nobody@example.com", groups: ["unmapped"] });
    const res = await call("GET", "/v1/fleets", { headers: { "Cf-Access-Jwt-Assertion": jwt } });
    expect(res.status).toBe(200);
  });

  it("signs a console visitor in from the CF_Authorization cookie, as a listed session that ending closes", async () => {
    const email = `${uniq("cara")}@example.com`;
    const jwt = await assertion(current, { email, groups: [group] });
    const first = await consoleFetch("/console/audit?x=1", { cookie: `CF_Authorization=${jwt}` });
    expect(first.status).toBe(303);
    expect(first.headers.get("Location")).toBe("/console/audit?x=1");
    const cookie = `${SESSION}=${cookiesOf(first)[SESSION].value}`;
    expect((await consoleFetch("/console/audit", { cookie })).status).toBe(200);

    const sessions = await call("GET", "/v1/sso/sessions");
    const mine = sessions.json.items.find((x: { email: string }) => x.email === email);
    expect(mine).toMatchObject({ provider: "access", client: "console", scope: "write", fleets: [fleetA] });
    const token = await call("GET", `/v1/tokens/${mine.token_id}`);
    expect(token.json.description).toBe(`${email} signed in through Cloudflare Access (console)`);
    expect(Date.parse(token.json.expires_at)).toBeLessThanOrEqual(Date.now() + 600_000);

    expect((await call("DELETE", `/v1/sso/sessions/${mine.token_id}`)).status).toBe(200);
    const after = await consoleFetch("/console/audit", { cookie });
    expect(after.status).toBe(303);
    expect(after.headers.get("Location")).toContain("/console/sign-in");
    const listed = await call("GET", "/v1/sso/sessions");
    expect(listed.json.items.some((x: { token_id: string }) => x.token_id === mine.token_id)).toBe(false);
  });

  it("stores a console sign-in's token and its console session together or not at all", async () => {
    const email = `${uniq("dana")}@example.com`;
    const jwt = await assertion(current, { email, groups: [group] });
    // The console session's insert fails, as a crash between the two writes would leave them.
    await env.DB.prepare(
      "CREATE TRIGGER no_console_session BEFORE INSERT ON console_sessions BEGIN SELECT RAISE(ABORT, 'cut off'); END",
    ).run();
    try {
      const res = await consoleFetch("/console", { cookie: `CF_Authorization=${jwt}` });
      expect(res.status).toBe(500);
      expect(cookiesOf(res)[SESSION]).toBeUndefined();
    } finally {
      await env.DB.prepare("DROP TRIGGER no_console_session").run();
    }
    const name = `sso:${email.toLowerCase()}`;
    const tokenRows = await env.DB.prepare("SELECT id FROM tokens WHERE name = ?").bind(name).all();
    expect(tokenRows.results).toEqual([]);
    const listed = await call("GET", "/v1/sso/sessions");
    expect(listed.json.items.some((x: { email: string }) => x.email === email.toLowerCase())).toBe(false);
    const signIns = await env.DB.prepare("SELECT id FROM audit_log WHERE action = 'sso.sign_in' AND actor = ?")
      .bind(`access:${email.toLowerCase()}`)
      .all();
    expect(signIns.results).toEqual([]);

    // Once the session can be stored, the same visitor gets all of it.
    const ok = await consoleFetch("/console", { cookie: `CF_Authorization=${jwt}` });
    expect(ok.status).toBe(303);
    expect(cookiesOf(ok)[SESSION]).toBeDefined();
    const [held] = (await env.DB.prepare("SELECT id FROM tokens WHERE name = ?").bind(name).all<{ id: string }>())
      .results;
    const sessionRows = await env.DB.prepare("SELECT token_id FROM console_sessions WHERE token_id = ?")
      .bind(held.id)
      .all();
    expect(sessionRows.results).toHaveLength(1);
  });

  it("refuses a console visitor no mapping names, and one with a forged cookie, without a session", async () => {
    const unmapped = await assertion(current, { email: "zed@example.com", groups: ["nobody"] });
    const res = await consoleFetch("/console", { cookie: `CF_Authorization=${unmapped}` });
    expect(res.status).toBe(403);
    expect(await res.text()).toContain("no SSO mapping");
    expect(cookiesOf(res)[SESSION]).toBeUndefined();
    const forged = await assertion(await newKey(current.kid), { email: "ana@example.com", groups: [group] });
    const bad = await consoleFetch("/console", { cookie: `CF_Authorization=${forged}` });
    expect(bad.status).toBe(401);
    expect(cookiesOf(bad)[SESSION]).toBeUndefined();
  });
});
