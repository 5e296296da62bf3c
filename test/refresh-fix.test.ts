import { env } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import { call, createFleet, registerServer, report } from "./helpers";

const A1 = { name: "a", image: "a:1", version: "1" };

async function reporting(fleet: string, agents = [A1], rep = report(2, [A1])) {
  const s = await registerServer(fleet);
  await call("PUT", `/v1/servers/${s.id}/desired`, { body: { generation: 2, agents } });
  await call("PUT", "/v1/agent/inventory", { token: s.token, body: rep });
  return s;
}

describe("refresh", () => {
  it("wakes a parked poll, answers 200 with the refresh named even to a current If-None-Match, until the next report answers it", async () => {
    const f = await createFleet();
    const s = await reporting(f.id);
    const current = { "If-None-Match": '"2"' };
    expect((await call("GET", "/v1/agent/desired", { token: s.token, headers: current })).status).toBe(304);

    const started = Date.now();
    const parked = call("GET", "/v1/agent/desired?wait=20", { token: s.token, headers: current });
    await new Promise((r) => setTimeout(r, 100));
    const req = await call("POST", `/v1/servers/${s.id}/refresh`);
    expect(req.status).toBe(200);
    expect(req.json.refresh).toMatchObject({ requested_by: "token:bootstrap", answered_at: null });
    const woke = await parked;
    expect(Date.now() - started).toBeLessThan(10_000);
    expect(woke.status).toBe(200);
    expect(woke.json).toMatchObject({ generation: 2, refresh: { requested_at: req.json.refresh.requested_at } });
    // Still pending: the next poll answers 200 too, without parking.
    expect((await call("GET", "/v1/agent/desired?wait=20", { token: s.token, headers: current })).status).toBe(200);

    await call("PUT", "/v1/agent/inventory", { token: s.token, body: report(2, [A1]) });
    const after = (await call("GET", `/v1/servers/${s.id}`)).json;
    expect(after.refresh.answered_at).not.toBeNull();
    expect(Date.parse(after.refresh.answered_at)).toBeGreaterThanOrEqual(Date.parse(after.refresh.requested_at));
    expect((await call("GET", "/v1/agent/desired", { token: s.token, headers: current })).status).toBe(304);
    expect((await call("POST", `/v1/servers/${crypto.randomUUID()}/refresh`)).status).toBe(404);
  });
});

describe("POST /v1/check/server-agents/fix", () => {
  it("says in a dry run what it would do per server and changes nothing; then does it, audited", async () => {
    const f = await createFleet();
    const mismatch = await reporting(f.id, [A1], report(2, [{ name: "a", image: "a:0" }]));
    const behind = await reporting(f.id, [A1], report(1, []));
    const stale = await reporting(f.id);
    await env.DB.prepare("UPDATE servers SET status = 'stale' WHERE id = ?").bind(stale.id).run();

    const dry = await call("POST", "/v1/check/server-agents/fix", { body: { fleet: f.id } });
    expect(dry.status).toBe(200);
    expect(dry.json.dry_run).toBe(true);
    const plan = Object.fromEntries(dry.json.actions.map((a: any) => [a.server, [a.action, a.reasons, a.result]]));
    expect(plan).toEqual({
      [mismatch.id]: ["reissue", ["image_mismatch"], null],
      [behind.id]: ["refresh", ["generation_behind"], null],
      [stale.id]: ["none", ["stale_report"], null],
    });
    for (const s of [mismatch, behind, stale]) {
      const v = (await call("GET", `/v1/servers/${s.id}`)).json;
      expect(v.desired_generation).toBe(2);
      expect(v.refresh).toBeNull();
    }
    expect(
      (await call("GET", `/v1/audit?target=fleet:${f.id}`)).json.items.some((a: any) => a.action === "check.fix"),
    ).toBe(false);

    const real = await call("POST", "/v1/check/server-agents/fix", { body: { fleet: f.id, dry_run: false } });
    const done = Object.fromEntries(real.json.actions.map((a: any) => [a.server, a.result]));
    expect(done[mismatch.id]).toMatchObject({ ok: true, outcome: "reissued", generation: 3 });
    expect(done[behind.id]).toMatchObject({ ok: true, outcome: "refresh_requested" });
    expect(done[stale.id]).toBeNull();
    expect((await call("GET", `/v1/servers/${mismatch.id}/desired`)).json).toMatchObject({
      generation: 3,
      agents: [{ name: "a", image: "a:1" }],
    });
    expect((await call("GET", `/v1/servers/${behind.id}`)).json.refresh.answered_at).toBeNull();
    expect(
      (await call("GET", `/v1/audit?target=fleet:${f.id}`)).json.items.some((a: any) => a.action === "check.fix"),
    ).toBe(true);
  });

  /** Makes D1 refuse every audit row of this action (a real failing statement) until the returned drop runs. */
  async function refuseAudit(action: string) {
    const name = `refuse_${action.replace(/\W/g, "_")}`;
    await env.DB.exec(
      `CREATE TRIGGER ${name} BEFORE INSERT ON audit_log WHEN NEW.action = '${action}' BEGIN SELECT RAISE(ABORT, 'simulated: D1 refused the row'); END`,
    );
    return () => env.DB.exec(`DROP TRIGGER ${name}`);
  }

  it("writes nothing and answers 503 when the audit log refuses the fix's record, and fixes with it", async () => {
    const f = await createFleet();
    const mismatch = await reporting(f.id, [A1], report(2, [{ name: "a", image: "a:0" }]));
    const allow = await refuseAudit("check.fix");
    const refused = await call("POST", "/v1/check/server-agents/fix", { body: { fleet: f.id, dry_run: false } });
    await allow();
    expect(refused.status).toBe(503);
    expect(refused.json.error).toMatchObject({
      code: "unavailable",
      message: expect.stringContaining("nothing was fixed"),
    });
    expect((await call("GET", `/v1/servers/${mismatch.id}/desired`)).json.generation).toBe(2);

    const done = await call("POST", "/v1/check/server-agents/fix", { body: { fleet: f.id, dry_run: false } });
    expect(done.status).toBe(200);
    expect(done.json.actions[0].result).toMatchObject({ ok: true, outcome: "reissued", generation: 3 });
  });

  it("answers with what it did when D1 refuses the result's row after the writes", async () => {
    const f = await createFleet();
    const mismatch = await reporting(f.id, [A1], report(2, [{ name: "a", image: "a:0" }]));
    const allow = await refuseAudit("check.fix.result");
    const res = await call("POST", "/v1/check/server-agents/fix", { body: { fleet: f.id, dry_run: false } });
    await allow();
    expect(res.status).toBe(200);
    expect(res.json.actions[0].result).toMatchObject({ ok: true, outcome: "reissued", generation: 3 });
    expect((await call("GET", `/v1/servers/${mismatch.id}/desired`)).json.generation).toBe(3);
    // The intent went in first, naming the server; the ledger audited its own write.
    const audit = (await call("GET", `/v1/audit?target=fleet:${f.id}`)).json.items;
    expect(audit.find((a: any) => a.action === "check.fix").details.actions).toEqual([
      { server: mismatch.id, action: "reissue", reasons: ["image_mismatch"] },
    ]);
    expect(audit.some((a: any) => a.action === "check.fix.result")).toBe(false);
  });

  it("refuses bad input", async () => {
    expect((await call("POST", "/v1/check/server-agents/fix", { body: { dry_run: "yes" } })).json.error.code).toBe(
      "validation_failed",
    );
    expect(
      (await call("POST", "/v1/check/server-agents/fix", { body: { fleet: "x", cursor: "zzz" } })).json.error.code,
    ).toBe("invalid_cursor");
  });
});

describe("refresh for a fleet", () => {
  it("asks every server of the fleet, page by page, leaving removed and decommissioning ones out", async () => {
    const f = await createFleet();
    const a = await reporting(f.id);
    const b = await reporting(f.id);
    const gone = await reporting(f.id);
    await call("POST", `/v1/servers/${gone.id}/decommission`);
    const first = await call("POST", `/v1/fleets/${f.id}/refresh?limit=1`);
    expect(first.status).toBe(200);
    expect(first.json.requested).toBe(1);
    const second = await call("POST", `/v1/fleets/${f.id}/refresh?limit=1&cursor=${first.json.next_cursor}`);
    expect(second.json.requested).toBe(1);
    expect(second.json.next_cursor).toBeNull();
    for (const s of [a, b]) expect((await call("GET", `/v1/servers/${s.id}`)).json.refresh.answered_at).toBeNull();
    expect((await call("GET", `/v1/servers/${gone.id}`)).json.refresh).toBeNull();
    expect(
      (await call("GET", "/v1/agent/desired", { token: a.token, headers: { "If-None-Match": '"2"' } })).status,
    ).toBe(200);
    expect((await call("POST", `/v1/fleets/nope-${Date.now()}/refresh`)).status).toBe(404);
  });
});

describe("operators waiting on a server's view", () => {
  it("wake when a refresh is requested, and see its answer", async () => {
    const f = await createFleet();
    const s = await reporting(f.id);
    const tag = (await call("GET", `/v1/servers/${s.id}`)).headers.get("ETag")!;
    const started = Date.now();
    const parked = call("GET", `/v1/servers/${s.id}?wait=20`, { headers: { "If-None-Match": tag } });
    await new Promise((r) => setTimeout(r, 200));
    await call("POST", `/v1/servers/${s.id}/refresh`);
    const woke = await parked;
    expect(woke.status).toBe(200);
    expect(Date.now() - started).toBeLessThan(10_000);
    expect(woke.json.refresh.answered_at).toBeNull();
    const tag2 = woke.headers.get("ETag")!;
    expect(tag2).not.toBe(tag);
    await call("PUT", "/v1/agent/inventory", { token: s.token, body: report(2, [A1]) });
    const answered = await call("GET", `/v1/servers/${s.id}`, { headers: { "If-None-Match": tag2 } });
    expect(answered.status).toBe(200);
    expect(answered.json.refresh.answered_at).not.toBeNull();
  });
});
