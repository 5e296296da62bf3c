import { createExecutionContext, env, waitOnExecutionContext } from "cloudflare:test";
import { beforeEach, describe, expect, it } from "vitest";
import { createApp } from "../src/app";
import { NEWEST_VERSION, UPGRADE_STEPS } from "../src/upgrades/steps";
import { ADMIN, BASE, call, createFleet, registerServer, report, uniq } from "./helpers";
import { attempts, dataVersion, resetUpgrades } from "./upgrades-helpers";

/**
 * A fresh app per test: the drain remembers, per isolate, that it has seen the newest version,
 * and these tests roll the data version back, which a real deployment never does.
 */
async function fresh() {
  const app = createApp();
  const ctx = createExecutionContext();
  const send = async (method: string, path: string, opts: { token?: string; body?: unknown } = {}) => {
    const headers: Record<string, string> = { Authorization: `Bearer ${opts.token ?? ADMIN}` };
    if (opts.body !== undefined) headers["Content-Type"] = "application/json";
    const res = await app.request(
      `${BASE}${path}`,
      { method, headers, body: opts.body === undefined ? undefined : JSON.stringify(opts.body) },
      env,
      ctx,
    );
    return { status: res.status, headers: res.headers, json: (await res.json().catch(() => null)) as any };
  };
  return { send, settle: () => waitOnExecutionContext(ctx) };
}

beforeEach(async () => {
  await resetUpgrades(NEWEST_VERSION);
});

describe("drain while upgrade steps are pending", () => {
  it("answers writes with 503 upgrade_in_progress and Retry-After, keeps reads and host reports going, and lets writes through after the run", async () => {
    const fleet = await createFleet();
    const server = await registerServer(fleet.id);
    await resetUpgrades(NEWEST_VERSION - 1);
    const api = await fresh();

    const refused = await api.send("POST", "/v1/fleets", { body: { id: uniq("f") } });
    expect(refused.status).toBe(503);
    expect(refused.headers.get("Retry-After")).toMatch(/^\d+$/);
    expect(refused.json.error).toMatchObject({
      code: "upgrade_in_progress",
      details: { data_version: NEWEST_VERSION - 1, newest_version: NEWEST_VERSION },
    });
    expect(
      (await api.send("PUT", `/v1/servers/${server.id}/desired`, { body: { generation: 2, agents: [] } })).status,
    ).toBe(503);
    expect((await api.send("DELETE", `/v1/tokens/${crypto.randomUUID()}`)).status).toBe(503);

    expect((await api.send("GET", `/v1/servers/${server.id}`)).status).toBe(200);
    expect((await api.send("GET", "/v1/fleets")).status).toBe(200);
    const hostReport = await api.send("PUT", "/v1/agent/inventory", { token: server.token, body: report(1, []) });
    expect(hostReport.status).toBe(200);

    // The refused write kicked a run in the background; once it is done, writes go through.
    await api.settle();
    expect(await dataVersion()).toBe(NEWEST_VERSION);
    expect((await attempts()).map((a) => [a.version, a.state, a.runner.split(":")[0]])).toEqual([
      [NEWEST_VERSION, "applied", "request"],
    ]);
    expect((await api.send("POST", "/v1/fleets", { body: { id: uniq("f") } })).status).toBe(201);
  });

  it("stays out of the way once the data is current, without reading the version again", async () => {
    const api = await fresh();
    expect((await api.send("POST", "/v1/fleets", { body: { id: uniq("f") } })).status).toBe(201);
    // Rolling the version back cannot happen in production; this isolate has stopped looking.
    await resetUpgrades(0);
    expect((await api.send("POST", "/v1/fleets", { body: { id: uniq("f") } })).status).toBe(201);
  });
});

describe("GET /v1/upgrades", () => {
  it("shows the data version, the pending steps and the state, then the history after a run", async () => {
    await resetUpgrades(0);
    const before = await call("GET", "/v1/upgrades");
    expect(before.status).toBe(200);
    expect(before.json).toMatchObject({
      state: "pending",
      data_version: 0,
      newest_version: NEWEST_VERSION,
      pending: UPGRADE_STEPS.map((s) => ({ version: s.version, description: s.description })),
      lease: null,
      last_run: null,
      history: { items: [], next_cursor: null },
    });

    expect((await call("POST", "/v1/upgrades/run")).json).toMatchObject({
      outcome: "applied",
      data_version: NEWEST_VERSION,
      applied: UPGRADE_STEPS.map((s) => s.version),
    });

    const after = await call("GET", "/v1/upgrades");
    expect(after.json).toMatchObject({ state: "current", data_version: NEWEST_VERSION, pending: [], lease: null });
    expect(after.json.last_run).toMatchObject({ state: "succeeded", from_version: 0, to_version: NEWEST_VERSION });
    expect(after.json.last_run.runner).toMatch(/^operator\(token:bootstrap\):/);
    expect(after.json.history.items[0]).toMatchObject({ version: NEWEST_VERSION, state: "applied", error: null });
    expect(after.json.history.items[0].finished_at).toMatch(/^\d{4}-/);
  });

  it("pages the history newest first", async () => {
    for (let i = 0; i < 3; i++) {
      await env.DB.prepare(
        "INSERT INTO upgrade_steps (run_id, version, description, runner, state, started_at, finished_at, error) VALUES (1, 1, 'x', 'cron:a', 'failed', ?, ?, 'boom')",
      )
        .bind(i, i)
        .run();
    }
    const first = await call("GET", "/v1/upgrades?limit=2");
    expect(first.json.history.items).toHaveLength(2);
    expect(first.json.history.items[0].id).toBeGreaterThan(first.json.history.items[1].id);
    const second = await call("GET", `/v1/upgrades?limit=2&cursor=${first.json.history.next_cursor}`);
    expect(second.json.history.items).toHaveLength(1);
    expect(second.json.history.next_cursor).toBeNull();
    expect((await call("GET", "/v1/upgrades?cursor=nope")).json.error.code).toBe("invalid_cursor");
    expect((await call("GET", "/v1/upgrades?limit=0")).status).toBe(400);
  });

  it("names the lease holder while a run is in progress", async () => {
    await resetUpgrades(0);
    const now = Date.now();
    await env.DB.prepare(
      "INSERT INTO upgrade_runs (runner, state, from_version, started_at, heartbeat_at) VALUES ('cron:busy', 'running', 0, ?, ?)",
    )
      .bind(now, now)
      .run();
    const got = await call("GET", "/v1/upgrades");
    expect(got.json).toMatchObject({
      state: "running",
      lease: { runner: "cron:busy", state: "running", stale: false },
    });

    const busy = await call("POST", "/v1/upgrades/run");
    expect(busy.status).toBe(409);
    expect(busy.json.error).toMatchObject({ code: "upgrade_lease_held", details: { lease: { runner: "cron:busy" } } });
  });
});

describe("POST /v1/upgrades/run", () => {
  it("needs an admin token", async () => {
    const token = await call("POST", "/v1/tokens", { body: { name: "writer", scope: "write" } });
    expect((await call("POST", "/v1/upgrades/run", { token: token.json.token })).status).toBe(403);
    expect((await call("POST", "/v1/upgrades/run", { token: null })).status).toBe(401);
    expect((await call("GET", "/v1/upgrades", { token: token.json.token })).status).toBe(200);
  });

  it("reports up_to_date when nothing is pending, and audits a run that did work", async () => {
    expect((await call("POST", "/v1/upgrades/run")).json).toMatchObject({
      outcome: "up_to_date",
      run_id: null,
      applied: [],
    });
    await resetUpgrades(0);
    const ran = await call("POST", "/v1/upgrades/run");
    const audit = await call("GET", "/v1/audit?target=upgrades");
    expect(audit.json.items[0]).toMatchObject({
      action: "upgrade.run",
      actor: "token:bootstrap",
      details: { outcome: "applied" },
    });
    expect(ran.json.run_id).toEqual(expect.any(Number));
  });
});
