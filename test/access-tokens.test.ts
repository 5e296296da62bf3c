import { env } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import { grantFor } from "../src/auth/grants";
import { revokeToken } from "../src/auth/service";
import { fleetAllowed, type OperatorPrincipal } from "../src/domain/principal";
import { breakD1, call, createFleet, fireTimersNow, registerServer, settle } from "./helpers";
import { ledger, sleep } from "./support/objects";

async function token(body: Record<string, unknown>, as?: string) {
  const res = await call("POST", "/v1/tokens", { token: as, body: { name: "t", scope: "read", ...body } });
  expect(res.status, JSON.stringify(res.json)).toBe(201);
  return res.json as { id: string; token: string; fleets: "*" | string[]; expires_at: string | null };
}

const operator = (over: Partial<OperatorPrincipal>): OperatorPrincipal => ({
  kind: "operator",
  id: "x",
  name: "x",
  scope: "admin",
  fleets: "*",
  via: "token",
  ...over,
});

describe("fleetAllowed", () => {
  it("allows every fleet to a * principal and only the listed names to a scoped one", () => {
    expect(fleetAllowed(operator({}), "anything")).toBe(true);
    const p = operator({ fleets: ["web", "db"] });
    expect(fleetAllowed(p, "web")).toBe(true);
    expect(fleetAllowed(p, "db")).toBe(true);
    expect(fleetAllowed(p, "we")).toBe(false);
    expect(fleetAllowed(p, "*")).toBe(false);
    expect(fleetAllowed({ kind: "server", serverId: "s", tokenHash: "h" }, "web")).toBe(false);
  });
});

describe("grantFor", () => {
  const now = Date.parse("2026-01-01T00:00:00Z");
  it("gives a new token its creator's fleets and expiry when it names none", () => {
    const creator = operator({ fleets: ["a"], expiresAt: now + 1000 });
    expect(grantFor(creator, { scope: "read" }, now)).toEqual({ scope: "read", fleets: ["a"], expiresAt: now + 1000 });
  });
  it("refuses fleets, a scope or an expiry beyond the creator's", () => {
    const creator = operator({ scope: "write", fleets: ["a", "b"], expiresAt: now + 1000 });
    expect(() => grantFor(creator, { scope: "admin" }, now)).toThrow(/cannot create a 'admin'/);
    expect(() => grantFor(creator, { scope: "read", fleets: "*" }, now)).toThrow(/"\*" token/);
    expect(() => grantFor(creator, { scope: "read", fleets: ["a", "c"] }, now)).toThrow(/only its own fleets/);
    expect(() => grantFor(creator, { scope: "read", expires_at: new Date(now + 2000).toISOString() }, now)).toThrow(
      /at most/,
    );
    expect(grantFor(creator, { scope: "read", fleets: ["b"] }, now).fleets).toEqual(["b"]);
  });
});

describe("operator tokens carry fleets, a description and an expiry", () => {
  it("stores and shows them; the bootstrap token's tokens default to every fleet", async () => {
    const everything = await token({});
    expect(everything.fleets).toBe("*");
    const expires = new Date(Date.now() + 3600_000).toISOString();
    const t = await token({ fleets: ["web", "db"], description: "CI for web", expires_at: expires });
    const shown = await call("GET", `/v1/tokens/${t.id}`);
    expect(shown.json).toMatchObject({
      fleets: ["web", "db"],
      description: "CI for web",
      expires_at: expires,
      state: "active",
    });
    const audit = await call("GET", `/v1/audit?target=token:${t.id}`);
    expect(audit.json.items[0]).toMatchObject({
      action: "token.create",
      actor: "token:bootstrap",
      details: { fleets: ["web", "db"], description: "CI for web", expires_at: expires },
    });
  });

  it("answers a token of a hundred fleets on every list, however often a query checks them", async () => {
    const { id: mine } = await createFleet();
    const names = [mine, ...Array.from({ length: 99 }, (_, i) => `other-${i}`)];
    const t = await token({ fleets: names });
    for (const path of [
      `/v1/check/server-agents?fleet=${mine}`,
      "/v1/check/server-agents",
      "/v1/servers",
      "/v1/instances",
      "/v1/rollouts",
      "/v1/fleets",
      "/v1/images",
    ]) {
      const res = await call("GET", path, { token: t.token });
      expect(res.status, `${path}: ${JSON.stringify(res.json)}`).toBe(200);
    }
  });

  it("refuses an expired token as 401, exactly as an unknown one", async () => {
    const t = await token({ expires_at: new Date(Date.now() + 3600_000).toISOString() });
    expect((await call("GET", "/v1/fleets", { token: t.token })).status).toBe(200);
    await env.DB.prepare("UPDATE tokens SET expires_at = ? WHERE id = ?")
      .bind(Date.now() - 1, t.id)
      .run();
    const refused = await call("GET", "/v1/fleets", { token: t.token });
    expect(refused.status).toBe(401);
    expect(refused.json.error.code).toBe("unauthorized");
    expect((await call("GET", `/v1/tokens/${t.id}`)).json.state).toBe("expired");
  });

  it("refuses bad fleets and an expiry in the past as 400, writing nothing", async () => {
    const before = await env.DB.prepare("SELECT count(*) AS n FROM tokens").first<{ n: number }>();
    for (const body of [
      { fleets: [] },
      { fleets: ["Web!"] },
      { fleets: ["a", "a"] },
      { fleets: "all" },
      { expires_at: new Date(Date.now() - 1000).toISOString() },
      { expires_at: "tomorrow" },
      { description: "" },
    ]) {
      const res = await call("POST", "/v1/tokens", { body: { name: "bad", scope: "read", ...body } });
      expect(res.status, JSON.stringify(body)).toBe(400);
      expect(res.json.error.code).toBe("validation_failed");
    }
    const after = await env.DB.prepare("SELECT count(*) AS n FROM tokens").first<{ n: number }>();
    expect(after?.n).toBe(before?.n);
  });

  it("lets a scoped admin create tokens only within its own fleets", async () => {
    const a = (await createFleet()).id;
    const b = (await createFleet()).id;
    const admin = await token({ scope: "admin", fleets: [a] });
    const child = await token({ scope: "write" }, admin.token);
    expect(child.fleets).toEqual([a]);
    for (const fleets of ["*", [b], [a, b], ["no-such-fleet"]]) {
      const res = await call("POST", "/v1/tokens", { token: admin.token, body: { name: "x", scope: "read", fleets } });
      expect(res.status, JSON.stringify(fleets)).toBe(403);
      expect(res.json.error.code).toBe("forbidden");
    }
  });
});

describe("DELETE /v1/tokens/{id} called at the same time", () => {
  it("revokes once: one audit row, every caller answered with the one revocation", async () => {
    const t = await token({ name: "raced" });
    const answers = await Promise.all(Array.from({ length: 6 }, () => call("DELETE", `/v1/tokens/${t.id}`)));
    expect(answers.map((a) => a.status)).toEqual(Array(6).fill(200));
    expect(new Set(answers.map((a) => a.json.state))).toEqual(new Set(["revoked"]));
    const [row] = (
      await env.DB.prepare("SELECT revoked_at FROM tokens WHERE id = ?").bind(t.id).all<{ revoked_at: number }>()
    ).results;
    // Every answer names the revocation that happened, not the time its own call tried.
    expect(new Set(answers.map((a) => a.json.revoked_at))).toEqual(new Set([new Date(row.revoked_at).toISOString()]));
    const audit = await env.DB.prepare("SELECT at FROM audit_log WHERE action = 'token.revoke' AND target = ?")
      .bind(`token:${t.id}`)
      .all<{ at: number }>();
    expect(audit.results).toEqual([{ at: row.revoked_at }]);
  });
});

describe("DELETE /v1/tokens/{id} that loses the race", () => {
  it("answers the winner's revoked_at as committed, read back in its own transaction", async () => {
    const t = await token({ name: "lost race" });
    const winnerAt = Date.parse("2026-01-02T03:04:05.678Z");
    let batched = false;
    // The winner revokes between this call's read and its batch; after the batch D1 answers
    // nothing more (a second read would be a window of its own, or an outage between two statements).
    const db = new Proxy(env.DB, {
      get(target, prop) {
        if (prop === "prepare")
          return (query: string) => {
            if (batched) throw new Error("D1 unreachable after the batch");
            return target.prepare(query);
          };
        if (prop === "batch")
          return async (statements: D1PreparedStatement[]) => {
            await target.prepare("UPDATE tokens SET revoked_at = ? WHERE id = ?").bind(winnerAt, t.id).run();
            const out = await target.batch(statements);
            batched = true;
            return out;
          };
        const value = Reflect.get(target, prop);
        return typeof value === "function" ? value.bind(target) : value;
      },
    });
    const answer = await revokeToken({ ...env, DB: db }, operator({}), t.id);
    expect(answer.revokedAt).toBe(winnerAt);
    const audit = await env.DB.prepare(
      "SELECT COUNT(*) AS n FROM audit_log WHERE action = 'token.revoke' AND target = ?",
    )
      .bind(`token:${t.id}`)
      .first<{ n: number }>();
    expect(audit?.n).toBe(0);
  });
});

describe("DELETE /v1/tokens/{id} of a server token while D1 lags behind its ledger", () => {
  it("answers the time the ledger recorded, the same to every revoke, and D1 gets that time once it takes the row", async () => {
    const fleet = await createFleet();
    const s = await registerServer(fleet.id);
    await settle(s.id);
    // D1 refuses the ledger's token row: the revocation is the ledger's alone for now.
    const restore = await breakD1(ledger(s.id));
    const first = await call("DELETE", `/v1/tokens/${s.id}`);
    await sleep(20);
    const second = await call("DELETE", `/v1/tokens/${s.id}`);
    expect([first.status, second.status]).toEqual([200, 200]);
    expect(first.json).toMatchObject({ state: "revoked", revoked_at: expect.any(String) });
    expect(second.json.revoked_at).toBe(first.json.revoked_at);
    expect(
      (
        await env.DB.prepare("SELECT revoked_at FROM tokens WHERE id = ?")
          .bind(s.id)
          .first<{ revoked_at: number | null }>()
      )?.revoked_at,
    ).toBeNull();
    await restore();
    await fireTimersNow(ledger(s.id));
    const row = await env.DB.prepare("SELECT revoked_at FROM tokens WHERE id = ?")
      .bind(s.id)
      .first<{ revoked_at: number }>();
    expect(new Date(row!.revoked_at).toISOString()).toBe(first.json.revoked_at);
    // And once D1 has it, a revoke answers the same.
    expect((await call("DELETE", `/v1/tokens/${s.id}`)).json.revoked_at).toBe(first.json.revoked_at);
    // A new token works again: its own revocation is a new one, at its own time.
    expect((await call("POST", `/v1/servers/${s.id}/token`)).status).toBe(200);
    await sleep(20);
    const third = await call("DELETE", `/v1/tokens/${s.id}`);
    expect(Date.parse(third.json.revoked_at)).toBeGreaterThan(Date.parse(first.json.revoked_at));
  });
});

describe("DELETE /v1/tokens/{id} of a server token rotated while D1 lags behind its ledger", () => {
  it("revokes the token the ledger holds now, though D1's copy still shows the revocation before the rotation", async () => {
    const fleet = await createFleet();
    const s = await registerServer(fleet.id);
    await settle(s.id);
    expect((await call("DELETE", `/v1/tokens/${s.id}`)).status).toBe(200);
    await fireTimersNow(ledger(s.id));
    // D1 refuses the ledger's rows from here: the rotation's working token is the ledger's alone,
    // and D1's row still says revoked.
    const restore = await breakD1(ledger(s.id));
    const rotated = await call("POST", `/v1/servers/${s.id}/token`);
    expect(rotated.status).toBe(200);
    const fresh = rotated.json.token as string;
    expect((await call("GET", "/v1/agent/desired", { token: fresh })).status).toBe(200);
    const revoked = await call("DELETE", `/v1/tokens/${s.id}`);
    expect(revoked.json).toMatchObject({ state: "revoked" });
    // The operator was told revoked: the token must not work.
    expect((await call("GET", "/v1/agent/desired", { token: fresh })).status).toBe(401);
    await restore();
    await fireTimersNow(ledger(s.id));
    const row = await env.DB.prepare("SELECT revoked_at FROM tokens WHERE id = ?")
      .bind(s.id)
      .first<{ revoked_at: number }>();
    expect(new Date(row!.revoked_at).toISOString()).toBe(revoked.json.revoked_at);
  });
});
