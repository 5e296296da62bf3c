import { describe, expect, it } from "vitest";
import { call, createFleet, d1Statements, registerServer, report } from "./helpers";

async function tokenWith(scope: "read" | "write" | "admin") {
  const res = await call("POST", "/v1/tokens", { body: { name: `${scope} bot`, scope } });
  expect(res.status).toBe(201);
  return res.json as { id: string; token: string };
}

describe("authentication and scopes", () => {
  it("answers 401 without a token and with a bad one", async () => {
    for (const token of [
      null,
      "nope",
      "hmo.00000000-0000-4000-8000-000000000000.AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA",
    ]) {
      const res = await call("GET", "/v1/fleets", { token });
      expect(res.status).toBe(401);
      expect(res.json.error.code).toBe("unauthorized");
    }
  });

  it("lets each scope do what it covers and answers 403 beyond it", async () => {
    const read = await tokenWith("read");
    const write = await tokenWith("write");
    const admin = await tokenWith("admin");
    expect((await call("GET", "/v1/fleets", { token: read.token })).status).toBe(200);
    const denied = await call("POST", "/v1/fleets", { token: read.token, body: { id: "read-cannot" } });
    expect(denied.status).toBe(403);
    expect(denied.json.error.code).toBe("forbidden");
    expect((await call("GET", "/v1/fleets/read-cannot")).status).toBe(404);

    const fleet = await call("POST", "/v1/fleets", { token: write.token, body: { id: `w-${Date.now()}` } });
    expect(fleet.status).toBe(201);
    expect((await call("POST", "/v1/tokens", { token: write.token, body: { name: "x", scope: "read" } })).status).toBe(
      403,
    );
    expect((await call("POST", "/v1/tokens", { token: admin.token, body: { name: "x", scope: "read" } })).status).toBe(
      201,
    );
  });

  it("stores only hashes, lists tokens without secrets, and revocation takes effect at once", async () => {
    const t = await tokenWith("read");
    const list = await call("GET", "/v1/tokens?kind=operator&limit=500");
    const listed = list.json.items.find((x: any) => x.id === t.id);
    expect(listed).toMatchObject({ scope: "read", revoked_at: null });
    expect(JSON.stringify(list.json)).not.toContain(t.token);

    const revoked = await call("DELETE", `/v1/tokens/${t.id}`);
    expect(revoked.status).toBe(200);
    expect(revoked.json.revoked_at).not.toBeNull();
    expect((await call("GET", "/v1/fleets", { token: t.token })).status).toBe(401);
    const audit = await call("GET", `/v1/audit?target=token:${t.id}`);
    expect(audit.json.items.map((e: any) => e.action)).toEqual(["token.revoke", "token.create"]);
  });
});

describe("server tokens", () => {
  it("reach only /v1/agent/* for their own server: 403 on every operator endpoint", async () => {
    const fleet = await createFleet();
    const a = await registerServer(fleet.id);
    const b = await registerServer(fleet.id);
    const attempts: [string, string, unknown?][] = [
      ["GET", `/v1/servers/${b.id}`],
      ["GET", `/v1/servers/${a.id}`],
      ["GET", `/v1/servers/${b.id}/desired`],
      ["PUT", `/v1/servers/${b.id}/desired`, { generation: 9, agents: [] }],
      ["GET", `/v1/servers?fleet=${fleet.id}`],
      ["POST", "/v1/servers", { fleet: fleet.id, hostname: "x.example", kind: "manual" }],
      ["GET", `/v1/instances?server=${b.id}`],
      ["GET", `/v1/fleets/${fleet.id}`],
      ["GET", "/v1/fleets"],
      ["POST", "/v1/fleets", { id: "sneaky" }],
      ["GET", "/v1/tokens"],
      ["POST", "/v1/tokens", { name: "x", scope: "admin" }],
      ["GET", "/v1/audit"],
    ];
    for (const [method, path, body] of attempts) {
      const res = await call(method, path, { token: a.token, body });
      expect([403, 404], `${method} ${path}`).toContain(res.status);
      expect(res.status, `${method} ${path}`).toBe(403);
    }
    const bView = await call("GET", `/v1/servers/${b.id}/desired`);
    expect(bView.json.generation).toBe(1);
  });

  it("carry their server's identity: A's token reads and reports only A's ledger", async () => {
    const fleet = await createFleet();
    const a = await registerServer(fleet.id);
    const b = await registerServer(fleet.id);
    const got = await call("GET", "/v1/agent/desired", { token: a.token });
    expect(got.json.server_id).toBe(a.id);
    // A token naming B's id with A's secret is not B's token.
    const forged = `hms.${b.id}.${a.token.split(".")[2]}`;
    expect((await call("GET", "/v1/agent/desired", { token: forged })).status).toBe(401);
    expect((await call("PUT", "/v1/agent/inventory", { token: forged, body: report(1, []) })).status).toBe(401);
    expect((await call("GET", `/v1/servers/${b.id}`)).json.status).toBe("unknown");
  });

  it("are refused once revoked", async () => {
    const fleet = await createFleet();
    const s = await registerServer(fleet.id);
    expect((await call("DELETE", `/v1/tokens/${s.id}`)).status).toBe(200);
    expect((await call("GET", "/v1/agent/desired", { token: s.token })).status).toBe(401);
    expect((await call("PUT", "/v1/agent/inventory", { token: s.token, body: report(1, []) })).status).toBe(401);
  });

  it("stop at once when rotated or revoked though just used, and a wrong secret is refused alike", async () => {
    // The Worker keeps each server token's digest (src/auth/principal.ts); the ledger still decides.
    const fleet = await createFleet();
    const s = await registerServer(fleet.id);
    const wrong = `hms.${s.id}.${"A".repeat(43)}`;
    const poll = (token: string) => call("GET", "/v1/agent/desired", { token });
    const refusal = (res: Awaited<ReturnType<typeof call>>) => {
      expect(res.status).toBe(401);
      expect(res.headers.get("WWW-Authenticate")).toBe('Bearer realm="harbormaster"');
      const { request_id, ...rest } = res.json.error;
      expect(request_id).toEqual(expect.any(String));
      return rest;
    };
    const cold = refusal(await poll(wrong));
    expect(cold).toEqual({ code: "unauthorized", message: "invalid server token" });
    expect((await poll(s.token)).status).toBe(200);
    expect((await poll(s.token)).status).toBe(200);
    // The right token of this very server was just used: a wrong secret is still no token.
    expect(refusal(await poll(wrong))).toEqual(cold);
    expect(refusal(await call("PUT", "/v1/agent/inventory", { token: wrong, body: report(1, []) }))).toEqual(cold);

    const rotated = await call("POST", `/v1/servers/${s.id}/token`);
    expect(rotated.status).toBe(200);
    expect(refusal(await poll(s.token))).toEqual(cold);
    expect(refusal(await call("PUT", "/v1/agent/inventory", { token: s.token, body: report(1, []) }))).toEqual(cold);
    const fresh = rotated.json.token as string;
    expect((await poll(fresh)).status).toBe(200);

    expect((await call("DELETE", `/v1/tokens/${s.id}`)).status).toBe(200);
    expect(refusal(await poll(fresh))).toEqual(cold);
    expect(refusal(await call("PUT", "/v1/agent/inventory", { token: fresh, body: report(1, []) }))).toEqual(cold);
  });

  it("are not operator tokens, and operator tokens are not server tokens", async () => {
    expect((await call("GET", "/v1/agent/desired")).status).toBe(403);
    expect((await call("GET", "/v1/agent/desired", { token: "garbage" })).status).toBe(401);
  });

  it("answer a desired-config poll with 304 without touching D1", async () => {
    const fleet = await createFleet();
    const s = await registerServer(fleet.id);
    const before = await d1Statements();
    for (let i = 0; i < 5; i++) {
      const res = await call("GET", "/v1/agent/desired", { token: s.token, headers: { "If-None-Match": '"1"' } });
      expect(res.status).toBe(304);
    }
    const after = await d1Statements();
    expect(after).toEqual(before);
  });
});
