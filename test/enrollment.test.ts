import { env } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import { enroll } from "../src/enrollment/service";
import { call, createFleet, registerServer, uniq } from "./helpers";

const DAY = 24 * 3600 * 1000;
const inDays = (d: number) => new Date(Date.now() + d * DAY).toISOString();

async function newToken(fleet: string, body: Record<string, unknown> = {}) {
  const res = await call("POST", `/v1/fleets/${fleet}/enrollment-tokens`, { body: { expires_at: inDays(1), ...body } });
  if (res.status !== 201) throw new Error(`token: ${res.status} ${JSON.stringify(res.json)}`);
  return res.json as { id: string; token: string; uses: number; max_uses: number };
}

const machine = () => ({
  hostname: `${uniq("m")}.example.com`,
  machine_id: crypto.randomUUID().replace(/-/g, ""),
  boot_id: crypto.randomUUID(),
});

const enrollWith = (token: string | null, body: unknown) => call("POST", "/v1/agent/enroll", { token, body });

async function tokenRow(id: string) {
  return (await env.DB.prepare("SELECT uses, last_used_at FROM enrollment_tokens WHERE id = ?").bind(id).first()) as {
    uses: number;
  };
}
const countRows = async (sql: string, ...args: unknown[]) =>
  (
    (await env.DB.prepare(sql)
      .bind(...args)
      .first()) as { n: number }
  ).n;

describe("enrollment tokens", () => {
  it("creates a token shown once, lists it without its secret, and revokes it", async () => {
    const { id: fleet } = await createFleet();
    const created = await newToken(fleet, {
      name: "web pool",
      roles: ["web"],
      reboot_group: "canary",
      kind: "manual",
      max_uses: 5,
      hostname_pattern: "web-*.example.com",
    });
    expect(created.token).toMatch(new RegExp(`^hme\\.${created.id}\\.[A-Za-z0-9_-]{43}$`));
    expect(created).toMatchObject({
      fleet,
      name: "web pool",
      roles: ["web"],
      reboot_group: "canary",
      kind: "manual",
      max_uses: 5,
      uses: 0,
      state: "active",
      hostname_pattern: "web-*.example.com",
    });

    const list = await call("GET", `/v1/fleets/${fleet}/enrollment-tokens`);
    expect(list.status).toBe(200);
    expect(list.json.items.map((t: any) => t.id)).toEqual([created.id]);
    expect(JSON.stringify(list.json)).not.toContain(created.token.split(".")[2]);
    const one = await call("GET", `/v1/fleets/${fleet}/enrollment-tokens/${created.id}`);
    expect(one.json).not.toHaveProperty("token");

    const revoked = await call("DELETE", `/v1/fleets/${fleet}/enrollment-tokens/${created.id}`);
    expect(revoked.status).toBe(200);
    expect(revoked.json).toMatchObject({ state: "revoked" });
    expect(revoked.json.revoked_at).not.toBeNull();
    // Revoking again changes nothing and says so the same way.
    expect((await call("DELETE", `/v1/fleets/${fleet}/enrollment-tokens/${created.id}`)).json.revoked_at).toBe(
      revoked.json.revoked_at,
    );

    const audit = await call("GET", `/v1/audit?target=${encodeURIComponent(`enrollment-token:${created.id}`)}`);
    expect(audit.json.items.map((a: any) => a.action).sort()).toEqual([
      "enrollment_token.create",
      "enrollment_token.revoke",
    ]);
  });

  it("refuses an expiry over 30 days or in the past, a bad hostname pattern, and a read token, writing nothing", async () => {
    const { id: fleet } = await createFleet();
    for (const body of [
      { expires_at: inDays(31) },
      { expires_at: inDays(-1) },
      { expires_at: "tomorrow" },
      {},
      { expires_at: inDays(1), hostname_pattern: "web-[0-9].example.com" },
      { expires_at: inDays(1), hostname_pattern: "*.*.*.*.*.*.*.*.*" },
      { expires_at: inDays(1), hostname_pattern: "a".repeat(254) },
      { expires_at: inDays(1), max_uses: 0 },
    ]) {
      const res = await call("POST", `/v1/fleets/${fleet}/enrollment-tokens`, { body });
      expect(res.status, JSON.stringify(body)).toBe(400);
      expect(res.json.error.code).toBe("validation_failed");
    }
    expect((await newToken(fleet, { expires_at: inDays(29.9) })).id).toBeTruthy();
    const read = await call("POST", "/v1/tokens", { body: { name: "reader", scope: "read" } });
    const denied = await call("POST", `/v1/fleets/${fleet}/enrollment-tokens`, {
      token: read.json.token,
      body: { expires_at: inDays(1) },
    });
    expect(denied.status).toBe(403);
    expect((await call("GET", `/v1/fleets/${fleet}/enrollment-tokens`)).json.items).toHaveLength(1);
    expect(
      (await call("POST", `/v1/fleets/no-such-fleet/enrollment-tokens`, { body: { expires_at: inDays(1) } })).status,
    ).toBe(404);
  });
});

describe("enrollment token creates with an Idempotency-Key", () => {
  const create = (fleet: string, key: string, body: Record<string, unknown>) =>
    call("POST", `/v1/fleets/${fleet}/enrollment-tokens`, { body, headers: { "Idempotency-Key": key } });
  const tokensOf = async (fleet: string) =>
    countRows("SELECT COUNT(*) AS n FROM enrollment_tokens WHERE fleet_id = ?", fleet);

  it("answers a retry with the same key and request with the same token: one row, the lost secret refused", async () => {
    const { id: fleet } = await createFleet();
    const key = crypto.randomUUID();
    const body = { name: "retried", expires_at: inDays(1), labels: { a: "1", b: "2" } };
    const first = await create(fleet, key, body);
    expect(first.status).toBe(201);
    // The same request, as a retry would send it: labels in another order, the expiry in another offset.
    const expiry = new Date(Date.parse(body.expires_at));
    const again = await create(fleet, key, {
      ...body,
      labels: { b: "2", a: "1" },
      expires_at: expiry.toISOString().replace("Z", "+00:00"),
      max_uses: 1,
    });
    expect(again.status).toBe(201);
    expect(again.json.id).toBe(first.json.id);
    expect(again.json.token).not.toBe(first.json.token);
    expect(await tokensOf(fleet)).toBe(1);
    // The secret is issued again: the lost answer's no longer enrolls, the retry's does.
    expect((await enrollWith(first.json.token, machine())).status).toBe(401);
    expect((await enrollWith(again.json.token, machine())).status).toBe(201);
    const audit = await call("GET", `/v1/audit?target=enrollment-token:${first.json.id}`);
    expect(audit.json.items.map((e: any) => e.action).sort()).toEqual([
      "enrollment_token.create",
      "enrollment_token.reissue",
    ]);
  });

  it("refuses the old secret once a reissue committed after its request read the token, spending nothing", async () => {
    const { id: fleet } = await createFleet();
    const key = crypto.randomUUID();
    const body = { name: "raced", expires_at: inDays(1), max_uses: 2 };
    const first = await create(fleet, key, body);
    let again: Awaited<ReturnType<typeof create>> | undefined;
    const m = machine();
    await expect(
      enroll(env, `Bearer ${first.json.token}`, m, {
        afterRead: async () => {
          again = await create(fleet, key, body);
        },
      }),
    ).rejects.toMatchObject({ code: "unauthorized", message: "not a valid enrollment token" });
    expect(again?.status).toBe(201);
    expect(await tokenRow(first.json.id)).toMatchObject({ uses: 0, last_used_at: null });
    expect(await countRows("SELECT COUNT(*) AS n FROM enrollments WHERE token_id = ?", first.json.id)).toBe(0);
    expect((await enrollWith(again!.json.token, m)).status).toBe(201);
  });

  it("gives the old secret no retry's answer for a machine the new secret enrolled meanwhile", async () => {
    const { id: fleet } = await createFleet();
    const key = crypto.randomUUID();
    const body = { name: "raced-retry", expires_at: inDays(1), max_uses: 2 };
    const first = await create(fleet, key, body);
    const m = machine();
    let enrolled: Awaited<ReturnType<typeof enrollWith>> | undefined;
    await expect(
      enroll(env, `Bearer ${first.json.token}`, m, {
        afterRead: async () => {
          const again = await create(fleet, key, body);
          enrolled = await enrollWith(again.json.token, m);
        },
      }),
    ).rejects.toMatchObject({ code: "unauthorized", message: "not a valid enrollment token" });
    expect(enrolled?.status).toBe(201);
    // The new secret's server token still works: the old secret rotated nothing.
    expect((await call("GET", "/v1/agent/desired", { token: enrolled!.json.token })).status).toBe(200);
    expect((await tokenRow(first.json.id)).uses).toBe(1);
  });

  it("refuses the same key with another request (409 idempotency_key_reused), writing nothing", async () => {
    const { id: fleet } = await createFleet();
    const { id: other } = await createFleet();
    const key = crypto.randomUUID();
    const first = await create(fleet, key, { expires_at: inDays(1) });
    for (const [where, body] of [
      [fleet, { expires_at: inDays(1), max_uses: 2 }],
      [other, first.json && { expires_at: first.json.expires_at }],
    ] as const) {
      const res = await create(where, key, body);
      expect(res.status).toBe(409);
      expect(res.json.error).toMatchObject({ code: "idempotency_key_reused", details: { token_id: first.json.id } });
    }
    expect(await tokensOf(fleet)).toBe(1);
    expect(await tokensOf(other)).toBe(0);
    // The first secret still works: a refused retry changes nothing.
    expect((await enrollWith(first.json.token, machine())).status).toBe(201);
  });

  it("refuses to issue the secret again once the token enrolled a machine or was revoked", async () => {
    const { id: fleet } = await createFleet();
    const used = crypto.randomUUID();
    const body = { expires_at: inDays(1), max_uses: 5 };
    const first = await create(fleet, used, body);
    expect((await enrollWith(first.json.token, machine())).status).toBe(201);
    const again = await create(fleet, used, body);
    expect(again.status).toBe(409);
    expect(again.json.error.code).toBe("idempotency_key_reused");
    // Whoever holds the secret keeps enrolling with it.
    expect((await enrollWith(first.json.token, machine())).status).toBe(201);

    // Presented by a machine whose enrollment was refused (its use given back): someone holds it.
    const taken = `${uniq("taken")}.example.com`;
    await registerServer(fleet, { hostname: taken });
    const triedKey = crypto.randomUUID();
    const tried = await create(fleet, triedKey, body);
    const refused = await enrollWith(tried.json.token, { ...machine(), hostname: taken });
    expect(refused.json.error.code).toBe("hostname_taken");
    expect((await tokenRow(tried.json.id)).uses).toBe(0);
    expect((await create(fleet, triedKey, body)).json.error.code).toBe("idempotency_key_reused");
    expect((await enrollWith(tried.json.token, machine())).status).toBe(201);

    const revokedKey = crypto.randomUUID();
    const second = await create(fleet, revokedKey, body);
    await call("DELETE", `/v1/fleets/${fleet}/enrollment-tokens/${second.json.id}`);
    expect((await create(fleet, revokedKey, body)).json.error.code).toBe("idempotency_key_reused");
  });

  it("refuses to issue the secret of an expired token again, writing nothing", async () => {
    const { id: fleet } = await createFleet();
    const key = crypto.randomUUID();
    const body = { expires_at: inDays(1) };
    const first = await create(fleet, key, body);
    expect(first.status).toBe(201);
    // Its retry comes after the token's expiry (a script run again the next day, say).
    await env.DB.prepare("UPDATE enrollment_tokens SET expires_at = ? WHERE id = ?")
      .bind(Date.now() - 1, first.json.id)
      .run();
    const hash = () =>
      env.DB.prepare("SELECT hash FROM enrollment_tokens WHERE id = ?").bind(first.json.id).first("hash");
    const before = await hash();
    const again = await create(fleet, key, body);
    expect(again.status).toBe(409);
    expect(again.json.error).toMatchObject({
      code: "idempotency_key_reused",
      message: expect.stringContaining("expired"),
      details: { token_id: first.json.id },
    });
    expect(await hash()).toBe(before);
    const audit = await call("GET", `/v1/audit?target=enrollment-token:${first.json.id}`);
    expect(audit.json.items.map((e: any) => e.action)).toEqual(["enrollment_token.create"]);
  });

  it("makes one token of racing creates with one key; keys are the creator's own", async () => {
    const { id: fleet } = await createFleet();
    const key = crypto.randomUUID();
    const body = { expires_at: inDays(1) };
    const answers = await Promise.all(Array.from({ length: 5 }, () => create(fleet, key, body)));
    const ok = answers.filter((a) => a.status === 201);
    expect(ok.length).toBeGreaterThanOrEqual(1);
    for (const a of answers.filter((a) => a.status !== 201)) expect(a.json.error.code).toBe("idempotency_key_reused");
    expect(new Set(ok.map((a) => a.json.id)).size).toBe(1);
    expect(await tokensOf(fleet)).toBe(1);
    // Another operator's same key is another create.
    const writer = await call("POST", "/v1/tokens", { body: { name: "w", scope: "write" } });
    const theirs = await call("POST", `/v1/fleets/${fleet}/enrollment-tokens`, {
      token: writer.json.token,
      body,
      headers: { "Idempotency-Key": key },
    });
    expect(theirs.status).toBe(201);
    expect(theirs.json.id).not.toBe(ok[0].json.id);
    expect(await tokensOf(fleet)).toBe(2);
  });

  it("refuses a malformed key as 400 and creates without one as before", async () => {
    const { id: fleet } = await createFleet();
    for (const key of ["has space", "x".repeat(256), "ünïcode"]) {
      const res = await create(fleet, key, { expires_at: inDays(1) });
      expect(res.status, key).toBe(400);
      expect(["validation_failed", "invalid_header"]).toContain(res.json.error.code);
    }
    expect(await tokensOf(fleet)).toBe(0);
    await newToken(fleet);
    await newToken(fleet);
    expect(await tokensOf(fleet)).toBe(2);
  });
});

describe("POST /v1/agent/enroll", () => {
  it("registers the server as POST /v1/servers does, with the token's roles, group and kind, and audits it with the token's id", async () => {
    const { id: fleet } = await createFleet();
    const t = await newToken(fleet, { roles: ["web"], reboot_group: "canary", kind: "manual" });
    const m = machine();
    const res = await enrollWith(t.token, { ...m, fleetlock_id: "node-a" });
    expect(res.status).toBe(201);
    expect(res.json).toMatchObject({
      fleet,
      hostname: m.hostname,
      roles: ["web"],
      reboot_group: "canary",
      kind: "manual",
      fleetlock_id: "node-a",
      state: "provisioning",
    });
    expect(res.json.token).toMatch(new RegExp(`^hms\\.${res.json.id}\\.`));
    // The server token works on the host API.
    expect((await call("GET", "/v1/agent/desired", { token: res.json.token })).status).toBe(200);
    expect((await tokenRow(t.id)).uses).toBe(1);

    const audit = await call("GET", `/v1/audit?target=${encodeURIComponent(`server:${res.json.id}`)}`);
    const enrolled = audit.json.items.find((a: any) => a.action === "server.enroll");
    expect(enrolled).toMatchObject({
      actor: `enrollment-token:${t.id}`,
      details: { token_id: t.id, machine_id: m.machine_id, retry: false },
    });
    expect(audit.json.items.find((a: any) => a.action === "server.register")).toMatchObject({
      actor: `enrollment-token:${t.id}`,
    });
  });

  it("answers 401 to an expired, revoked, used-up or forged token, an operator token and a server token", async () => {
    const { id: fleet } = await createFleet();
    const revoked = await newToken(fleet);
    await call("DELETE", `/v1/fleets/${fleet}/enrollment-tokens/${revoked.id}`);
    const usedUp = await newToken(fleet, { max_uses: 1 });
    expect((await enrollWith(usedUp.token, machine())).status).toBe(201);
    const expired = await newToken(fleet);
    await env.DB.prepare("UPDATE enrollment_tokens SET expires_at = ? WHERE id = ?")
      .bind(Date.now() - 1000, expired.id)
      .run();
    const live = await newToken(fleet);
    const forged = `hme.${live.id}.${"A".repeat(43)}`;
    const operator = (await call("POST", "/v1/tokens", { body: { name: "op", scope: "admin" } })).json.token;
    const server = (await registerServer(fleet)).token;
    for (const token of [
      revoked.token,
      usedUp.token,
      expired.token,
      forged,
      operator,
      server,
      "test-admin-token",
      null,
    ]) {
      const res = await enrollWith(token, machine());
      expect(res.status, String(token)).toBe(401);
      expect(res.json.error.code).toBe("unauthorized");
      expect(res.headers.get("WWW-Authenticate")).toContain("Bearer");
    }
    expect((await tokenRow(usedUp.id)).uses).toBe(1);
    expect(await countRows("SELECT count(*) AS n FROM servers WHERE fleet_id = ?", fleet)).toBe(2);
  });

  it("answers 401 to a wrong token before it looks at the body; a live token's bad body is 400", async () => {
    const { id: fleet } = await createFleet();
    const revoked = await newToken(fleet);
    await call("DELETE", `/v1/fleets/${fleet}/enrollment-tokens/${revoked.id}`);
    const live = await newToken(fleet);
    const server = (await registerServer(fleet)).token;
    const bodies = ["{", "null", "{}", JSON.stringify({ ...machine(), hostname: 1 })];
    for (const token of [
      revoked.token,
      `hme.${live.id}.${"A".repeat(43)}`,
      server,
      "test-admin-token",
      "garbage",
      null,
    ]) {
      for (const rawBody of bodies) {
        const res = await call("POST", "/v1/agent/enroll", {
          token,
          rawBody,
          headers: { "Content-Type": "application/json" },
        });
        expect(res.status, `${token} ${rawBody}`).toBe(401);
        expect(res.json.error.code).toBe("unauthorized");
      }
    }
    for (const rawBody of bodies) {
      const res = await call("POST", "/v1/agent/enroll", {
        token: live.token,
        rawBody,
        headers: { "Content-Type": "application/json" },
      });
      expect(res.status, rawBody).toBe(400);
    }
    expect((await tokenRow(live.id)).uses).toBe(0);
  });

  it("refuses a hostname outside the token's pattern (403) and a bad body (400), writing nothing", async () => {
    const { id: fleet } = await createFleet();
    const t = await newToken(fleet, { hostname_pattern: "web-??.example.com" });
    const outside = await enrollWith(t.token, { ...machine(), hostname: "db-01.example.com" });
    expect(outside.status).toBe(403);
    expect(outside.json.error.code).toBe("hostname_not_allowed");
    for (const body of [
      { hostname: "web-01.example.com", boot_id: "b" },
      { hostname: "web-01.example.com", machine_id: "", boot_id: "b" },
      { hostname: "web_01!", machine_id: "abc", boot_id: "b" },
      { hostname: "web-01.example.com", machine_id: "abc", boot_id: "b", extra: 1 },
    ]) {
      const res = await enrollWith(t.token, body);
      expect(res.status, JSON.stringify(body)).toBe(400);
    }
    expect((await tokenRow(t.id)).uses).toBe(0);
    expect(await countRows("SELECT count(*) AS n FROM enrollments WHERE token_id = ?", t.id)).toBe(0);
    expect(await countRows("SELECT count(*) AS n FROM servers WHERE fleet_id = ?", fleet)).toBe(0);
    const inside = await enrollWith(t.token, { ...machine(), hostname: "WEB-01.example.com" });
    expect(inside.status).toBe(201);
    expect(inside.json.hostname).toBe("web-01.example.com");
  });

  it("gives the use back when the hostname is taken (409), leaving nothing of the attempt", async () => {
    const { id: fleet } = await createFleet();
    const taken = await registerServer(fleet, { hostname: "taken.example.com" });
    const t = await newToken(fleet, { max_uses: 1 });
    const res = await enrollWith(t.token, { ...machine(), hostname: "taken.example.com" });
    expect(res.status).toBe(409);
    expect(res.json.error).toMatchObject({ code: "hostname_taken", details: { server_id: taken.id } });
    expect((await tokenRow(t.id)).uses).toBe(0);
    expect(await countRows("SELECT count(*) AS n FROM enrollments WHERE token_id = ?", t.id)).toBe(0);
    expect((await enrollWith(t.token, machine())).status).toBe(201);
  });

  it("counts uses atomically: 20 racing enrollments on max_uses 3 enroll exactly 3", async () => {
    const { id: fleet } = await createFleet();
    const t = await newToken(fleet, { max_uses: 3 });
    const answers = await Promise.all(Array.from({ length: 20 }, () => enrollWith(t.token, machine())));
    const statuses = answers.map((a) => a.status);
    expect(statuses.filter((s) => s === 201)).toHaveLength(3);
    expect(statuses.filter((s) => s === 401)).toHaveLength(17);
    expect((await tokenRow(t.id)).uses).toBe(3);
    expect(await countRows("SELECT count(*) AS n FROM enrollments WHERE token_id = ?", t.id)).toBe(3);
    expect(await countRows("SELECT count(*) AS n FROM servers WHERE fleet_id = ?", fleet)).toBe(3);
  });

  it("answers a retry from the same machine with the same server and a fresh token, revoking the first, and spends no use", async () => {
    const { id: fleet } = await createFleet();
    const t = await newToken(fleet, { max_uses: 1 });
    const m = machine();
    const first = await enrollWith(t.token, m);
    expect(first.status).toBe(201);
    const again = await enrollWith(t.token, { ...m, boot_id: crypto.randomUUID() });
    expect(again.status).toBe(201);
    expect(again.json.id).toBe(first.json.id);
    expect(again.json.token).not.toBe(first.json.token);
    expect((await call("GET", "/v1/agent/desired", { token: first.json.token })).status).toBe(401);
    expect((await call("GET", "/v1/agent/desired", { token: again.json.token })).status).toBe(200);
    expect((await tokenRow(t.id)).uses).toBe(1);
    const audit = await call("GET", `/v1/audit?target=${encodeURIComponent(`server:${first.json.id}`)}`);
    expect(
      audit.json.items
        .filter((a: any) => a.action === "server.enroll")
        .map((a: any) => a.details.retry)
        .sort(),
    ).toEqual([false, true]);

    // Under another hostname it is refused, and after the token is revoked the machine is refused too.
    const renamed = await enrollWith(t.token, { ...m, hostname: "other.example.com" });
    expect(renamed.status).toBe(409);
    expect(renamed.json.error.code).toBe("machine_enrolled");
    await call("DELETE", `/v1/fleets/${fleet}/enrollment-tokens/${t.id}`);
    expect((await enrollWith(t.token, m)).status).toBe(401);
  });

  it("survives a crash between the registration and the answer: the retry gets the same server, and the lost token is refused", async () => {
    const { id: fleet } = await createFleet();
    const t = await newToken(fleet, { max_uses: 1 });
    const m = machine();
    let lost = "";
    const crash = new Error("crashed before answering");
    await expect(
      enroll(env, `Bearer ${t.token}`, m, {
        afterRegister: async (r) => {
          lost = r.token;
          throw crash;
        },
      }),
    ).rejects.toBe(crash);
    expect(lost).toMatch(/^hms\./);
    const serverId = lost.split(".")[1];
    const retry = await enrollWith(t.token, m);
    expect(retry.status).toBe(201);
    expect(retry.json.id).toBe(serverId);
    expect((await call("GET", "/v1/agent/desired", { token: lost })).status).toBe(401);
    expect((await call("GET", "/v1/agent/desired", { token: retry.json.token })).status).toBe(200);
    expect((await tokenRow(t.id)).uses).toBe(1);
    expect(await countRows("SELECT count(*) AS n FROM servers WHERE fleet_id = ?", fleet)).toBe(1);
  });

  it("survives a crash between spending the use and the registration: the retry registers the recorded server", async () => {
    const { id: fleet } = await createFleet();
    const t = await newToken(fleet, { max_uses: 1 });
    const m = machine();
    let recorded = "";
    const crash = new Error("crashed before registering");
    await expect(
      enroll(env, `Bearer ${t.token}`, m, {
        afterClaim: async (id) => {
          recorded = id;
          throw crash;
        },
      }),
    ).rejects.toBe(crash);
    expect(await countRows("SELECT count(*) AS n FROM servers WHERE fleet_id = ?", fleet)).toBe(0);
    const retry = await enrollWith(t.token, m);
    expect(retry.status).toBe(201);
    expect(retry.json.id).toBe(recorded);
    expect((await call("GET", "/v1/agent/desired", { token: retry.json.token })).status).toBe(200);
    expect((await tokenRow(t.id)).uses).toBe(1);
    // Another machine finds the token used up.
    expect((await enrollWith(t.token, machine())).status).toBe(401);
  });
});

describe("hostname patterns", async () => {
  const { hostnameMatches, patternProblem } = await import("../src/enrollment/pattern");
  it("match `*` across dots and `?` as one character, whole hostnames only, in lower case", () => {
    expect(hostnameMatches("web-*.example.com", "web-1.eu.example.com")).toBe(true);
    expect(hostnameMatches("web-*.example.com", "WEB-1.example.com")).toBe(true);
    expect(hostnameMatches("web-*.example.com", "web-1.example.com.evil")).toBe(false);
    expect(hostnameMatches("db-??", "db-01")).toBe(true);
    expect(hostnameMatches("db-??", "db-1")).toBe(false);
    expect(hostnameMatches("*", "anything.at.all")).toBe(true);
    expect(hostnameMatches("a*b*c", "axxbyyc")).toBe(true);
    expect(hostnameMatches("a*b*c", "axxbyy")).toBe(false);
  });

  it("check a worst case quickly and refuse what is not a safe pattern", () => {
    const started = Date.now();
    expect(hostnameMatches("a*a*a*a*a*a*a*a*b", "a".repeat(253))).toBe(false);
    expect(Date.now() - started).toBeLessThan(50);
    expect(patternProblem("web-[0-9]")).not.toBeNull();
    expect(patternProblem("*.*.*.*.*.*.*.*.*")).not.toBeNull();
    expect(patternProblem("Web-*")).not.toBeNull();
    expect(patternProblem("web-*.example.com")).toBeNull();
  });
});

describe("a fleet deleted and created again", () => {
  it("is not enrolled into by the old fleet's tokens", async () => {
    const { id: fleet } = await createFleet();
    const t = await newToken(fleet);
    const del = await call("DELETE", `/v1/fleets/${fleet}`);
    expect(del.status).toBeLessThan(300);
    expect((await call("POST", "/v1/fleets", { body: { id: fleet } })).status).toBe(201);
    const res = await enrollWith(t.token, machine());
    expect(res.status).toBe(401);
    expect(res.json.error.message).toContain("no longer exists");
  });

  it("does not show or revoke the old fleet's tokens, deleted or created again", async () => {
    const { id: fleet } = await createFleet();
    const t = await newToken(fleet);
    expect((await call("DELETE", `/v1/fleets/${fleet}`)).status).toBeLessThan(300);
    const gone = `/v1/fleets/${fleet}/enrollment-tokens`;
    expect((await call("GET", gone)).status).toBe(404);
    expect((await call("GET", `${gone}/${t.id}`)).status).toBe(404);
    expect((await call("DELETE", `${gone}/${t.id}`)).status).toBe(404);
    expect((await call("POST", "/v1/fleets", { body: { id: fleet } })).status).toBe(201);
    const fresh = await newToken(fleet);
    const listed = await call("GET", gone);
    expect(listed.status).toBe(200);
    expect(listed.json.items.map((i: { id: string }) => i.id)).toEqual([fresh.id]);
    expect((await call("GET", `${gone}/${t.id}`)).status).toBe(404);
    expect((await call("DELETE", `${gone}/${t.id}`)).status).toBe(404);
    const row = await env.DB.prepare("SELECT revoked_at FROM enrollment_tokens WHERE id = ?").bind(t.id).first();
    expect(row).toEqual({ revoked_at: null });
  });
});
