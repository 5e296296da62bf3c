/**
 * The fleet history: the cron's rollup (src/history/rollup.service.ts) writes a row for a fleet only
 * when one of its figures changed, counts reboots and rollouts from the audit log once each, prunes
 * past 30 days but keeps the state at the cutoff; GET /v1/fleets/{fleet}/history serves the rows
 * as step series, spreads, per-day counts, in JSON and CSV. Index rows are written straight into D1.
 */
import { env } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import { rollupHistory, rollupIfDue } from "../src/history/rollup.service";
import { PERIOD_MS, RETENTION_MS, periodOf } from "../src/history/rollup";
import { timeTo95State } from "../src/history/shape";
import { call, createFleet, d1Rows } from "./helpers";
import { HISTORY_ROLLUP_ROWS } from "../scripts/bench/history-rollup";

const FAR = 4_000_000_000_000;

/** `n` active servers of `fleet` with `status`, each running `agent` at `version` (null: not reported). */
async function servers(
  fleet: string,
  tag: string,
  n: number,
  status: string,
  agent = "node",
  version: string | null = "1.0",
) {
  const ids = Array.from({ length: n }, (_, i) => `${fleet}-${tag}${i}`);
  const now = Date.now();
  await env.DB.batch(
    ids.flatMap((id) => [
      env.DB.prepare(
        `INSERT INTO servers (id, fleet_id, hostname, kind, roles, reboot_group, state, status, desired_generation, stale_at, created_at, updated_at)
         VALUES (?, ?, ?, 'managed', '[]', 'default', 'active', ?, 1, ?, ?, ?)`,
      ).bind(id, fleet, `${id}.example.com`, status, FAR, now, now),
      env.DB.prepare(
        `INSERT INTO agent_instances (server_id, agent, fleet_id, reported_version, status, updated_at) VALUES (?, ?, ?, ?, 'realized', ?)`,
      ).bind(id, agent, fleet, version, now),
    ]),
  );
  return ids;
}

const setStatus = (ids: string[], status: string) =>
  env.DB.batch(ids.map((id) => env.DB.prepare("UPDATE servers SET status = ? WHERE id = ?").bind(status, id)));
const setVersion = (ids: string[], version: string) =>
  env.DB.batch(
    ids.map((id) =>
      env.DB.prepare("UPDATE agent_instances SET reported_version = ? WHERE server_id = ?").bind(version, id),
    ),
  );

const audit = (action: string, actor: string, target: string, details: unknown) =>
  env.DB.prepare("INSERT INTO audit_log (at, actor, action, target, details) VALUES (?, ?, ?, ?, ?)")
    .bind(Date.now(), actor, action, target, JSON.stringify(details))
    .run();

const rowsOf = async (fleet: string) =>
  (
    await env.DB.prepare("SELECT * FROM fleet_history WHERE fleet_id = ? ORDER BY at").bind(fleet).all<{
      at: number;
      servers: string;
      versions: string;
      reboots: number;
      rollouts: number;
    }>()
  ).results;

// Rollups at period starts going forward from the present, one period apart.
const base = periodOf(Date.now()) + PERIOD_MS;
const tick = (i: number) => base + i * PERIOD_MS + 1_000;

describe("the history rollup", () => {
  it("writes a fleet's row only when a figure changed", async () => {
    const { id: fleet } = await createFleet();
    const ids = await servers(fleet, "a", 4, "realized");
    await rollupHistory(env, tick(0));
    let rows = await rowsOf(fleet);
    expect(rows).toHaveLength(1);
    expect(rows[0].at).toBe(base);
    expect(JSON.parse(rows[0].servers)).toMatchObject({ total: 4, realized: 4, failed: 0 });
    expect(JSON.parse(rows[0].versions)).toEqual({ node: { versions: { "1.0": 4 }, none: 0, other: 0 } });

    // Nothing moved: two more periods write nothing.
    await rollupHistory(env, tick(1));
    await rollupHistory(env, tick(2));
    expect(await rowsOf(fleet)).toHaveLength(1);

    // A status moves: one row; a version moves: one more.
    await setStatus(ids.slice(0, 1), "failed");
    await rollupHistory(env, tick(3));
    await setVersion(ids.slice(0, 2), "1.1");
    await rollupHistory(env, tick(4));
    rows = await rowsOf(fleet);
    expect(rows.map((r) => r.at)).toEqual([base, tick(3) - 1_000, tick(4) - 1_000]);
    expect(JSON.parse(rows[1].servers)).toMatchObject({ realized: 3, failed: 1 });
    expect(JSON.parse(rows[2].versions).node.versions).toEqual({ "1.0": 2, "1.1": 2 });

    // The same period rolled up twice (a repeated tick) keeps its first row.
    await setStatus(ids, "drifted");
    await rollupHistory(env, tick(4) + 30_000);
    expect(await rowsOf(fleet)).toHaveLength(3);
  });

  it("counts host reboots and started rollouts once, and writes a row for them though nothing else moved", async () => {
    const { id: fleet } = await createFleet();
    await servers(fleet, "r", 2, "realized");
    await rollupHistory(env, tick(0));
    await audit("fleetlock.grant", `server:${fleet}-r0`, `fleet:${fleet}`, { id: "m0", group: "default" });
    await audit("fleetlock.grant", `server:${fleet}-r1`, `fleet:${fleet}`, { id: "m1", group: "default" });
    // A rollout's own slot is not a reboot.
    await audit("fleetlock.grant", "rollout:r-1", `fleet:${fleet}`, { id: "x", group: "default" });
    await audit("rollout.start", "admin", "rollout:r-1", { fleet, agent: "node" });
    await rollupHistory(env, tick(1));
    await rollupHistory(env, tick(2));
    const rows = await rowsOf(fleet);
    expect(rows.map((r) => [r.reboots, r.rollouts])).toEqual([
      [0, 0],
      [2, 1],
    ]);
  });

  it("prunes rows past 30 days but keeps each fleet's newest of them", async () => {
    const { id: fleet } = await createFleet();
    await servers(fleet, "p", 1, "realized");
    const now = tick(0);
    const cutoff = periodOf(now) - RETENTION_MS;
    const put = (at: number, total: number) =>
      env.DB.prepare(
        "INSERT INTO fleet_history (fleet_id, at, servers, versions, reboots, rollouts) VALUES (?, ?, ?, '{}', 0, 0)",
      )
        .bind(fleet, at, JSON.stringify({ total }))
        .run();
    await put(cutoff - 3 * PERIOD_MS, 7);
    await put(cutoff - 2 * PERIOD_MS, 8);
    await put(cutoff + PERIOD_MS, 9);
    await rollupHistory(env, now);
    const rows = await rowsOf(fleet);
    expect(rows.map((r) => r.at)).toEqual([cutoff - 2 * PERIOD_MS, cutoff + PERIOD_MS, periodOf(now)]);
  });

  it("writes the rows of many fleets in one rollup (a statement per 50), each once", async () => {
    const ids = Array.from({ length: 120 }, (_, i) => `many-${Date.now().toString(36)}-${i}`);
    await env.DB.batch(
      ids.map((id) =>
        env.DB.prepare(
          "INSERT INTO fleets (id, capabilities, stale_after_s, lock_ttl_s, created_at) VALUES (?, '{}', 300, 3600, ?)",
        ).bind(id, Date.now()),
      ),
    );
    await rollupHistory(env, tick(30));
    await rollupHistory(env, tick(31));
    const { results } = await env.DB.prepare(
      `SELECT count(*) AS n, count(DISTINCT fleet_id) AS fleets FROM fleet_history WHERE fleet_id LIKE 'many-%'`,
    ).all<{ n: number; fleets: number }>();
    expect(results[0]).toEqual({ n: 120, fleets: 120 });
  });

  it("leaves no rows behind a deleted fleet", async () => {
    const { id: fleet } = await createFleet();
    await rollupHistory(env, tick(0));
    expect(await rowsOf(fleet)).toHaveLength(1);
    expect((await call("DELETE", `/v1/fleets/${fleet}`)).status).toBeLessThan(300);
    await rollupHistory(env, tick(1));
    expect(await rowsOf(fleet)).toHaveLength(0);
  });
});

describe("the history rollup's D1 cost", () => {
  it("writes nothing when nothing changed, and reads about four rows per server", async () => {
    const { id: fleet } = await createFleet();
    await servers(fleet, "k", 200, "realized");
    await rollupHistory(env, tick(20));
    const small = await d1Rows(() => rollupHistory(env, tick(21)));
    await servers(fleet, "l", 200, "realized");
    const changed = await d1Rows(() => rollupHistory(env, tick(22)));
    const large = await d1Rows(() => rollupHistory(env, tick(23)));
    // 200 more servers (each one agent instance): the same more rows read per server, whatever the history holds.
    const perServer = (large.read - small.read) / 200;
    console.log(
      `history rollup D1 rows: unchanged ${small.read} read, ${small.written} written (200 servers) / ` +
        `${large.read} read (400 servers), ${perServer} per server; a changed fleet: ${changed.written} written`,
    );
    // The figures the cost benchmark bills by arithmetic (scripts/bench/history-rollup.ts).
    expect({
      d1RowsReadPerServer: perServer,
      d1RowsWrittenPerRollup: small.written,
      d1RowsWrittenPerChange: changed.written - small.written,
    }).toEqual(HISTORY_ROLLUP_ROWS);
    expect(large.written).toBe(small.written);
  });

  it("rolls up on the cron's first tick of a period only, and on the next period's", async () => {
    const { id: fleet } = await createFleet();
    const ids = await servers(fleet, "d", 2, "realized");
    const t = tick(40);
    expect(await rollupIfDue(env, t)).not.toBeNull();
    await setStatus(ids, "failed");
    // The same period again (the next minute's tick): nothing read but the cursor, nothing written.
    const again = await d1Rows(async () => expect(await rollupIfDue(env, t + 60_000)).toBeNull());
    expect(again).toEqual({ read: 1, written: 0, trips: 1 });
    expect(await rowsOf(fleet)).toHaveLength(1);
    expect(await rollupIfDue(env, t + PERIOD_MS)).not.toBeNull();
    expect((await rowsOf(fleet)).map((r) => JSON.parse(r.servers).failed)).toEqual([0, 2]);
  });

  it("writes no D1 row on a quiet period's first tick, cursor and pruning included", async () => {
    const { id: fleet } = await createFleet();
    await servers(fleet, "q", 3, "realized");
    expect(await rollupIfDue(env, tick(60))).not.toBeNull();
    const quiet = await d1Rows(async () => expect(await rollupIfDue(env, tick(61))).toMatchObject({ written: 0 }));
    expect(quiet.written).toBe(0);
    // Nothing in D1 marks the quiet period; this isolate remembers it: its next tick reads nothing.
    const next = await d1Rows(async () => expect(await rollupIfDue(env, tick(61) + 60_000)).toBeNull());
    expect(next).toEqual({ read: 0, written: 0, trips: 0 });
    expect(await rowsOf(fleet)).toHaveLength(1);
  });

  it("prunes a quiet deployment's history once a day, on the day's first period", async () => {
    const DAY = 86_400_000;
    const { id: fleet } = await createFleet();
    await servers(fleet, "o", 1, "realized");
    const day = Math.ceil(tick(70) / DAY) * DAY;
    await rollupHistory(env, day - 2 * PERIOD_MS + 1_000);
    const cutoff = day - RETENTION_MS;
    for (const at of [cutoff - 3 * PERIOD_MS, cutoff - 2 * PERIOD_MS])
      await env.DB.prepare(
        "INSERT INTO fleet_history (fleet_id, at, servers, versions, reboots, rollouts) VALUES (?, ?, '{}', '{}', 0, 0)",
      )
        .bind(fleet, at)
        .run();
    // A quiet period within the day: nothing deleted, nothing written.
    expect((await d1Rows(() => rollupHistory(env, day - PERIOD_MS + 1_000))).written).toBe(0);
    expect(await rowsOf(fleet)).toHaveLength(3);
    // The day's first period: the rows past the retention go, but the newest of them.
    await rollupHistory(env, day + 1_000);
    expect((await rowsOf(fleet)).map((r) => r.at)).toEqual([cutoff - 2 * PERIOD_MS, day - 2 * PERIOD_MS]);
  });
});

describe("GET /v1/fleets/{fleet}/history", () => {
  /** A fleet whose node agent went from 1.0 to 2.0 over four periods, 24 h ago. */
  async function spreadFleet() {
    const { id: fleet } = await createFleet();
    const ids = await servers(fleet, "s", 20, "realized");
    const start = periodOf(Date.now()) - 12 * PERIOD_MS;
    const at = (i: number) => start + i * PERIOD_MS + 1_000;
    // The state before the window opens (2 hours ago).
    await rollupHistory(env, start - 24 * PERIOD_MS);
    await setVersion(ids.slice(0, 1), "2.0");
    await rollupHistory(env, at(0));
    await setVersion(ids.slice(0, 10), "2.0");
    await setStatus(ids.slice(10, 12), "pending");
    await rollupHistory(env, at(1));
    await setVersion(ids.slice(0, 19), "2.0");
    await setStatus(ids.slice(10, 12), "realized");
    await rollupHistory(env, at(2));
    await setVersion(ids, "2.0");
    await rollupHistory(env, at(3));
    return { fleet, start };
  }

  it("serves steps from the window's opening, each version's time to 95 %, and per-day counts", async () => {
    const { fleet, start } = await spreadFleet();
    const since = new Date(start - 60_000).toISOString();
    const res = await call("GET", `/v1/fleets/${fleet}/history?since=${since}`);
    expect(res.status).toBe(200);
    const h = res.json;
    expect(h.metrics).toEqual(["servers", "versions", "reboots", "rollouts"]);
    expect(h.period_s).toBe(300);
    expect(h.retention_days).toBe(30);
    // The first point is the row from before the window, moved to `since`.
    expect(h.servers[0].at).toBe(since);
    expect(h.servers.map((p: any) => p.by_status.pending)).toEqual([0, 0, 2, 0, 0]);
    const node = h.versions.find((a: any) => a.agent === "node");
    expect(node.points.map((p: any) => p.versions["2.0"] ?? 0)).toEqual([0, 1, 10, 19, 20]);
    const v2 = node.spread.find((s: any) => s.version === "2.0");
    expect(v2).toMatchObject({
      servers: 20,
      share: 1,
      first_seen_at: new Date(start).toISOString(),
      reached_95_at: new Date(start + 2 * PERIOD_MS).toISOString(),
      time_to_95_s: 600,
      time_to_95_state: "measured",
    });
    // 1.0 was there when the window opened: when it appeared is not known, and the answer says so.
    expect(node.spread.find((s: any) => s.version === "1.0")).toMatchObject({
      servers: 0,
      first_seen_at: null,
      time_to_95_s: null,
      time_to_95_state: "before_window",
    });
    expect(h.reboots.reduce((a: number, d: any) => a + d.count, 0)).toBe(0);
    expect(h.reboots.at(-1).day).toBe(new Date().toISOString().slice(0, 10));
  });

  it("answers only the metrics asked for, and one agent's versions", async () => {
    const { fleet } = await spreadFleet();
    const res = await call("GET", `/v1/fleets/${fleet}/history?metric=versions,reboots&agent=nothing&since=3h`);
    expect(res.status).toBe(200);
    expect(Object.keys(res.json)).not.toContain("servers");
    expect(res.json.versions).toEqual([]);
    expect(res.json.rollouts).toBeUndefined();
  });

  it("serves CSV for Accept: text/csv and ?format=csv, with a version string made harmless", async () => {
    const { id: fleet } = await createFleet();
    await servers(fleet, "c", 2, "realized", "node", '=cmd|" /c calc",x');
    await rollupHistory(env, Date.now());
    const byAccept = await call("GET", `/v1/fleets/${fleet}/history?metric=servers,versions`, {
      headers: { Accept: "text/csv" },
    });
    expect(byAccept.status).toBe(200);
    expect(byAccept.headers.get("Content-Type")).toMatch(/^text\/csv/);
    const lines = String(byAccept.json).trimEnd().split("\r\n");
    expect(lines[0]).toBe("at,metric,agent,series,value");
    expect(lines).toContainEqual(expect.stringMatching(/,servers,,realized,2$/));
    expect(lines).toContainEqual(expect.stringMatching(/,versions,node,"'=cmd\|"" \/c calc"",x",2$/));
    const byQuery = await call("GET", `/v1/fleets/${fleet}/history?metric=servers,versions&format=csv`);
    expect(byQuery.json).toBe(byAccept.json);
  });

  it("refuses a bad metric, a window past the retention or in the future, and answers 404 for a missing fleet", async () => {
    const { id: fleet } = await createFleet();
    for (const q of [
      "metric=servers,cpu",
      "since=31d",
      "since=yesterday",
      `since=${new Date(Date.now() + 3_600_000).toISOString()}`,
      "format=xml",
    ]) {
      const res = await call("GET", `/v1/fleets/${fleet}/history?${q}`);
      expect(res.status, q).toBe(400);
      expect(res.json.error.code, q).toBe("invalid_query");
    }
    const missing = await call("GET", "/v1/fleets/no-such-fleet/history");
    expect(missing.status).toBe(404);
    expect(missing.json.error.code).toBe("not_found");
  });
});

describe("a version's time to 95 % when there is no figure", () => {
  it("says the version started before the window, or has not reached 95 %, rather than leaving it empty", () => {
    expect(timeTo95State(true, false, true)).toBe("measured");
    expect(timeTo95State(false, true, true)).toBe("before_window");
    expect(timeTo95State(true, false, false)).toBe("not_reached");
    expect(timeTo95State(false, true, false)).toBe("not_reached");
  });
});
