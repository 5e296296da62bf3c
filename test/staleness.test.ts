import { createScheduledController, env } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import { runScheduled } from "../src/scheduled";
import { call, createFleet, d1Statements, registerServer, report } from "./helpers";

const statusOf = (id: string) => env.DB.prepare("SELECT status FROM servers WHERE id = ?").bind(id).first<string>("status");
const tick = (at = Date.now()) => runScheduled(createScheduledController({ scheduledTime: at }), env);

describe("staleness marking (cost ∝ change)", () => {
  it("keeps stale_at = last_seen + the fleet's stale_after in the index", async () => {
    const f = await createFleet({ stale_after_s: 60 });
    const s = await registerServer(f.id);
    expect(await env.DB.prepare("SELECT stale_at FROM servers WHERE id = ?").bind(s.id).first("stale_at")).toBeNull();
    await call("PUT", "/v1/agent/inventory", { token: s.token, body: report(1, []) });
    const row = await env.DB.prepare("SELECT last_seen, stale_at FROM servers WHERE id = ?").bind(s.id).first<any>();
    expect(row.stale_at).toBe(row.last_seen + 60_000);
  });

  it("marks only servers that newly crossed their deadline, in one statement whatever the fleets, and leaves stale ones alone", async () => {
    const fleets = [await createFleet({ stale_after_s: 60 }), await createFleet({ stale_after_s: 600 })];
    const servers = [];
    for (const f of fleets) {
      for (let i = 0; i < 2; i++) {
        const s = await registerServer(f.id);
        await call("PUT", "/v1/agent/inventory", { token: s.token, body: report(1, []) });
        servers.push(s);
      }
    }
    const now = Date.now();
    // Server 0 (fleet of 60 s) and 2 (fleet of 600 s) went silent 2 minutes ago: only 0 crossed.
    await env.DB.prepare("UPDATE servers SET last_seen = ?1, stale_at = ?1 + 60000 WHERE id = ?2").bind(now - 120_000, servers[0].id).run();
    await env.DB.prepare("UPDATE servers SET last_seen = ?1, stale_at = ?1 + 600000 WHERE id = ?2").bind(now - 120_000, servers[2].id).run();
    const before = await d1Statements();
    await tick(now);
    const after = await d1Statements();
    expect(after.writes - before.writes).toBe(1);
    expect(await statusOf(servers[0].id)).toBe("stale");
    for (const s of servers.slice(1)) expect(await statusOf(s.id)).not.toBe("stale");

    // Already stale: the next tick changes no row.
    const { markStale } = await import("../src/servers/staleness");
    const { getDb } = await import("../src/db/client");
    expect(await markStale(getDb(env.DB), now + 1000)).toBe(0);
  });

  it("reads through the partial index on stale_at, never the whole servers table", async () => {
    const plan = await env.DB.prepare(
      "EXPLAIN QUERY PLAN UPDATE servers SET status = 'stale', updated_at = 1 WHERE status != 'stale' AND stale_at < ?",
    ).bind(Date.now()).all<{ detail: string }>();
    const detail = plan.results.map((r) => r.detail).join(" | ");
    expect(detail).toMatch(/USING INDEX servers_stale_at_idx/);
    expect(detail).not.toMatch(/SCAN servers(?! USING)/);
  });
});
