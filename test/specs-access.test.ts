import { env } from "cloudflare:test";
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import { exportJWK, generateKeyPair, SignJWT, type CryptoKey, type JWK } from "jose";
import { call, createFleet, uniq } from "./helpers";
import { apply, auditOf, diff, getSpec } from "./specs-helpers";

const ISSUER = "https://hm-test.cloudflareaccess.com";
const CERTS = `${ISSUER}/cdn-cgi/access/certs`;
const AUD = "test-access-aud";

let key: { kid: string; privateKey: CryptoKey; jwk: JWK };
const realFetch = globalThis.fetch;

beforeAll(async () => {
  const kid = uniq("kid");
  const { privateKey, publicKey } = await generateKeyPair("RS256", { extractable: true });
  key = { kid, privateKey, jwk: { ...(await exportJWK(publicKey)), kid, alg: "RS256", use: "sig" } };
  vi.spyOn(globalThis, "fetch").mockImplementation(async (input, init) => {
    const url = input instanceof Request ? input.url : String(input);
    if (url === CERTS) return Response.json({ keys: [key.jwk] });
    return realFetch(input, init);
  });
});

afterAll(() => vi.restoreAllMocks());

/** A request as a user Cloudflare Access let through: its verified JWT, no bearer token. */
async function asUser(claims: { email: string; groups: string[] }) {
  const now = Math.floor(Date.now() / 1000);
  const jwt = await new SignJWT({ sub: crypto.randomUUID(), ...claims })
    .setProtectedHeader({ alg: "RS256", kid: key.kid })
    .setIssuer(ISSUER)
    .setAudience(AUD)
    .setIssuedAt(now - 5)
    .setExpirationTime(now + 600)
    .sign(key.privateKey);
  return { token: null, headers: { "Cf-Access-Jwt-Assertion": jwt } };
}

const specOf = (fleet: string, access?: Record<string, string>, more: Record<string, unknown> = {}) => ({
  apiVersion: "harbormaster/v1",
  kind: "FleetSpec",
  fleet,
  ...more,
  ...(access ? { access } : {}),
});

const rowsOf = async (fleet: string) =>
  (
    await env.DB.prepare("SELECT kind, value, scope FROM fleet_sso_mappings WHERE fleet_id = ? ORDER BY kind, value")
      .bind(fleet)
      .all()
  ).results;

const tokenFor = async (fleet: string, scope: "read" | "write" | "admin") => {
  const res = await call("POST", "/v1/tokens", { body: { name: uniq("t"), scope, fleets: [fleet] } });
  expect(res.status).toBe(201);
  return res.json.token as string;
};

describe("a fleet spec's access section", () => {
  it("is applied with the spec, shown by GET and the diff, and audited with the apply", async () => {
    const { id: fleet } = await createFleet();
    expect((await getSpec(fleet)).spec.access).toEqual({});
    const access = { "group:platform": "write", "email:ana@example.com": "admin", "group:ops:on-call": "read" };

    const d = await diff(fleet, specOf(fleet, access));
    expect(d.status).toBe(200);
    expect(d.json.items.filter((i: { section: string }) => i.section === "access")).toEqual([
      {
        section: "access",
        name: "email:ana@example.com",
        path: "access.email:ana@example.com",
        op: "add",
        before: null,
        after: "admin",
      },
      {
        section: "access",
        name: "group:ops:on-call",
        path: "access.group:ops:on-call",
        op: "add",
        before: null,
        after: "read",
      },
      {
        section: "access",
        name: "group:platform",
        path: "access.group:platform",
        op: "add",
        before: null,
        after: "write",
      },
    ]);
    expect(await rowsOf(fleet)).toEqual([]);

    const res = await apply(fleet, specOf(fleet, access));
    expect(res.status).toBe(200);
    expect(res.json.changed).toBe(true);
    expect(await rowsOf(fleet)).toEqual([
      { kind: "email", value: "ana@example.com", scope: "admin" },
      { kind: "group", value: "ops:on-call", scope: "read" },
      { kind: "group", value: "platform", scope: "write" },
    ]);
    const { spec, etag } = await getSpec(fleet);
    expect(spec.access).toEqual({
      "email:ana@example.com": "admin",
      "group:ops:on-call": "read",
      "group:platform": "write",
    });
    const entry = (await auditOf(fleet)).find((a) => a.action === "fleet.spec.apply")!;
    expect(entry.details.items.map((i: { path: string }) => i.path)).toContain("access.group:platform");

    // The same spec again writes nothing; a changed scope is a change.
    expect((await apply(fleet, spec, { ifMatch: etag })).json.changed).toBe(false);
    const changed = await diff(fleet, { ...spec, access: { ...spec.access, "group:platform": "read" } });
    expect(changed.json.items).toEqual([
      expect.objectContaining({ path: "access.group:platform", op: "change", before: "write", after: "read" }),
    ]);
  });

  it("is written with a fleet the spec creates, in the same batch", async () => {
    const fleet = uniq("f-new");
    const res = await apply(fleet, specOf(fleet, { "group:founders": "admin" }));
    expect(res.status).toBe(201);
    expect(await rowsOf(fleet)).toEqual([{ kind: "group", value: "founders", scope: "admin" }]);
  });

  it("leaves rows the spec does not list unless pruning, and removes them with prune", async () => {
    const { id: fleet } = await createFleet();
    expect((await apply(fleet, specOf(fleet, { "group:a": "read", "group:b": "write" }))).status).toBe(200);
    const kept = await apply(fleet, specOf(fleet, { "group:a": "read" }));
    expect(kept.json.items).toEqual([expect.objectContaining({ path: "access.group:b", op: "unlisted" })]);
    expect((await rowsOf(fleet)).length).toBe(2);
    const pruned = await apply(fleet, specOf(fleet, { "group:a": "read" }), { prune: true });
    expect(pruned.json.items).toEqual([expect.objectContaining({ path: "access.group:b", op: "remove" })]);
    expect(await rowsOf(fleet)).toEqual([{ kind: "group", value: "a", scope: "read" }]);
  });

  it("refuses bad keys and scopes with their paths, writing nothing of the spec", async () => {
    const { id: fleet } = await createFleet();
    const before = await getSpec(fleet);
    const res = await apply(
      fleet,
      specOf(
        fleet,
        {
          "team:x": "read",
          "email:Ana@Example.com": "read",
          "email:nobody": "read",
          "group: padded": "read",
          "group:": "read",
          "group:ok": "root",
          "group:ctl\u0007": "read",
        },
        { capabilities: { firewall: true } },
      ),
    );
    expect(res.status).toBe(422);
    expect(res.json.error.code).toBe("invalid_spec");
    const paths = res.json.error.details.problems.map((p: { path: string }) => p.path);
    for (const p of [
      "access.team:x",
      "access.email:Ana@Example.com",
      "access.email:nobody",
      "access.group: padded",
      "access.group:",
      "access.group:ok",
      "access.group:ctl\u0007",
    ]) {
      expect(paths).toContain(p);
    }
    expect(await rowsOf(fleet)).toEqual([]);
    expect((await getSpec(fleet)).etag).toBe(before.etag);
  });

  it("grants at most the applier's scope, refused with the path and nothing written", async () => {
    const { id: fleet } = await createFleet();
    const writer = await tokenFor(fleet, "write");
    const asWriter = (spec: unknown, prune = false) =>
      call("PUT", `/v1/fleets/${fleet}/spec${prune ? "?prune=true" : ""}`, { token: writer, body: spec });

    const above = await asWriter(
      specOf(fleet, { "group:ops": "admin", "group:dev": "write" }, { capabilities: { gpu: true } }),
    );
    expect(above.status).toBe(422);
    expect(above.json.error.code).toBe("invalid_spec");
    expect(above.json.error.details.problems).toEqual([
      {
        path: "access.group:ops",
        message: "a 'write' token cannot grant 'admin' access: a spec grants at most the applying token's scope",
      },
    ]);
    // Nothing of the spec: not the allowed row, not its capability.
    expect(await rowsOf(fleet)).toEqual([]);
    expect((await getSpec(fleet)).spec.capabilities).toEqual({});

    // Up to its own scope it may; an admin row someone else put there it may keep but not touch.
    expect((await asWriter(specOf(fleet, { "group:dev": "write" }))).status).toBe(200);
    expect((await apply(fleet, specOf(fleet, { "group:dev": "write", "group:ops": "admin" }))).status).toBe(200);
    expect((await asWriter(specOf(fleet, { "group:dev": "read", "group:ops": "admin" }))).status).toBe(200);
    const lower = await asWriter(specOf(fleet, { "group:dev": "read", "group:ops": "write" }));
    expect(lower.status).toBe(422);
    expect(lower.json.error.details.problems[0].path).toBe("access.group:ops");
    const drop = await asWriter(specOf(fleet, { "group:dev": "read" }), true);
    expect(drop.status).toBe(422);
    expect(drop.json.error.details.problems[0]).toMatchObject({
      path: "access.group:ops",
      message: expect.stringContaining("cannot remove 'admin'"),
    });
    expect(await rowsOf(fleet)).toEqual([
      { kind: "group", value: "dev", scope: "read" },
      { kind: "group", value: "ops", scope: "admin" },
    ]);
    // A fleet-limited admin may grant admin on its fleet.
    const admin = await tokenFor(fleet, "admin");
    const res = await call("PUT", `/v1/fleets/${fleet}/spec?prune=true`, {
      token: admin,
      body: specOf(fleet, { "group:dev": "admin" }),
    });
    expect(res.status).toBe(200);
    expect(await rowsOf(fleet)).toEqual([{ kind: "group", value: "dev", scope: "admin" }]);
  });

  it("is listed with the SSO mappings, each row on its fleet, to admins of that fleet only", async () => {
    const { id: a } = await createFleet();
    const { id: b } = await createFleet();
    expect((await apply(a, specOf(a, { "group:a-team": "write" }))).status).toBe(200);
    expect((await apply(b, specOf(b, { "group:b-team": "read", "email:bo@example.com": "admin" }))).status).toBe(200);
    const all = await call("GET", "/v1/sso/mappings");
    expect(all.status).toBe(200);
    const ofFleets = (list: { fleet: string }[], fleets: string[]) => list.filter((m) => fleets.includes(m.fleet));
    expect(ofFleets(all.json.from_specs, [a, b])).toEqual(
      [
        { fleet: a, kind: "group", value: "a-team", scope: "write" },
        { fleet: b, kind: "email", value: "bo@example.com", scope: "admin" },
        { fleet: b, kind: "group", value: "b-team", scope: "read" },
      ].sort((x, y) => (x.fleet < y.fleet ? -1 : x.fleet > y.fleet ? 1 : 0)),
    );
    const adminA = await tokenFor(a, "admin");
    const mine = await call("GET", "/v1/sso/mappings", { token: adminA });
    expect(mine.json.from_specs).toEqual([{ fleet: a, kind: "group", value: "a-team", scope: "write" }]);
    expect((await call("GET", "/v1/sso/mappings", { token: await tokenFor(a, "write") })).status).toBe(403);
  });

  it("goes with its fleet: a fleet created again under the name starts with no access", async () => {
    const { id: fleet } = await createFleet();
    expect((await apply(fleet, specOf(fleet, { "group:keep-out": "admin" }))).status).toBe(200);
    expect((await call("DELETE", `/v1/fleets/${fleet}`)).status).toBe(204);
    expect(await rowsOf(fleet)).toEqual([]);
    // The coordinator's wipe ran with the deletion: the name is free at once.
    expect((await call("POST", "/v1/fleets", { body: { id: fleet } })).status).toBe(201);
    expect((await getSpec(fleet)).spec.access).toEqual({});
  });
});

describe("SSO through a fleet spec's access section", () => {
  it("a Cloudflare Access user gets the fleet only through its spec, and loses it when the spec drops the row", async () => {
    const { id: fleetA } = await createFleet();
    const { id: fleetB } = await createFleet();
    const group = uniq("spec-team");
    const user = await asUser({ email: `${uniq("dee")}@example.com`, groups: [group] });

    // No D1 mapping names the group: refused.
    const before = await call("GET", `/v1/fleets/${fleetA}`, user);
    expect(before.status).toBe(403);
    expect(before.json.error.message).toContain("no SSO mapping");

    // Fleet B's spec names the group on B: it reaches B and nothing else, whatever fleet A is.
    expect((await apply(fleetB, specOf(fleetB, { [`group:${group}`]: "write" }))).status).toBe(200);
    expect((await call("GET", `/v1/fleets/${fleetB}`, user)).status).toBe(200);
    expect((await call("GET", `/v1/fleets/${fleetA}`, user)).status).toBe(404);
    const listed = await call("GET", "/v1/fleets?limit=500", user);
    expect(listed.json.items.map((f: { id: string }) => f.id)).toEqual([fleetB]);
    // Its scope is the row's: write on B, no admin route.
    const patch = await call("PATCH", `/v1/fleets/${fleetB}`, { ...user, body: { stale_after_s: 600 } });
    expect(patch.status).toBe(200);
    expect((await call("GET", "/v1/sso/mappings", user)).status).toBe(403);

    // The spec drops the row (prune): the next request is refused again.
    expect((await apply(fleetB, specOf(fleetB, {}), { prune: true })).status).toBe(200);
    const after = await call("GET", `/v1/fleets/${fleetB}`, user);
    expect(after.status).toBe(403);
    expect(after.json.error.message).toContain("no SSO mapping");
  });

  it("matches an email row lower-cased, as the provider's address is", async () => {
    const { id: fleet } = await createFleet();
    const email = `${uniq("eve")}@example.com`;
    expect((await apply(fleet, specOf(fleet, { [`email:${email}`]: "read" }))).status).toBe(200);
    const user = await asUser({ email: email.toUpperCase(), groups: [] });
    expect((await call("GET", `/v1/fleets/${fleet}`, user)).status).toBe(200);
    expect((await call("PATCH", `/v1/fleets/${fleet}`, { ...user, body: { stale_after_s: 600 } })).status).toBe(403);
  });
});
