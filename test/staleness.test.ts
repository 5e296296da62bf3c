import { createScheduledController, env } from "cloudflare:test";
import { sendAuditEvents } from "../src/audit/events.service";
import { archiveAudit } from "../src/audit/archive.service";
import { describe, expect, it } from "vitest";
import { getDb } from "../src/db/client";
import { servers as serversTable } from "../src/db/schema";
import { runScheduled } from "../src/scheduled";
import { INDEX_LEASE_MS } from "../src/ledger/projection";
import { d1RowsInto } from "../src/local/d1-taps";
import { isStale } from "../src/model/server/staleness";
import { call, createFleet, d1Statements, registerServer, report } from "./helpers";

/** A server's status as the index answers it (GET /v1/servers reads it at query time). */
async function statusOf(id: string) {
  const fleet = await env.DB.prepare("SELECT fleet_id FROM servers WHERE id = ?").bind(id).first<string>("fleet_id");
  const items = (await call("GET", `/v1/servers?fleet=${fleet}`)).json.items as { id: string; status: string }[];
  return items.find((s) => s.id === id)!.status;
}
const staleIds = async (fleet: string) =>
  ((await call("GET", `/v1/servers?fleet=${fleet}&status=stale`)).json.items as { id: string }[]).map((s) => s.id);
// The cron's statements counted as the local entry counts the Worker's (d1Statements).
const cronRows = { statements: 0, rowsRead: 0, rowsWritten: 0 };
const tick = (at = Date.now()) =>
  runScheduled(createScheduledController({ scheduledTime: at }), { ...env, DB: d1RowsInto(env.DB, cronRows) });

describe("staleness, read from stale_at (cost ∝ change)", () => {
  it("keeps stale_at = last_seen + the fleet's stale_after in the index, leased while the ledger watches its host", async () => {
    const f = await createFleet({ stale_after_s: 60 });
    const s = await registerServer(f.id);
    expect(await env.DB.prepare("SELECT stale_at FROM servers WHERE id = ?").bind(s.id).first("stale_at")).toBeNull();
    await call("PUT", "/v1/agent/inventory", { token: s.token, body: report(1, []) });
    const row = await env.DB.prepare("SELECT last_seen, stale_at FROM servers WHERE id = ?").bind(s.id).first<any>();
    // The quiet watch (src/ledger/quiet.ts) makes it exact when the host goes quiet.
    expect(row.stale_at).toBe(row.last_seen + 60_000 + INDEX_LEASE_MS);
  });

  it("shows stale only the servers past their deadline, whatever the fleets, with no status written by the cron", async () => {
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
    // A first tick rolls this period's fleet history up (src/history/), so the measured one below
    // writes only what staleness owes.
    await tick(now);
    // Server 0 (fleet of 60 s) and 2 (fleet of 600 s) went silent 2 minutes ago: only 0 crossed.
    await env.DB.prepare("UPDATE servers SET last_seen = ?1, stale_at = ?1 + 60000 WHERE id = ?2")
      .bind(now - 120_000, servers[0].id)
      .run();
    await env.DB.prepare("UPDATE servers SET last_seen = ?1, stale_at = ?1 + 600000 WHERE id = ?2")
      .bind(now - 120_000, servers[2].id)
      .run();
    // The audit trail's work owed by the setup (its rows as audit.recorded, days to cut) first.
    await sendAuditEvents(env, now);
    await sendAuditEvents(env, now);
    while ((await archiveAudit(env, now)).cut.length);
    const before = await d1Statements();
    await tick(now);
    const after = await d1Statements();
    // Nothing marks it: the one write is the webhooks' server.stale sweep moving its cursor past
    // the deadline that crossed (src/webhooks/stale.ts).
    expect(after.writes - before.writes).toBe(1);
    expect(await statusOf(servers[0].id)).toBe("stale");
    for (const s of servers.slice(1)) expect(await statusOf(s.id)).not.toBe("stale");
    expect(await staleIds(fleets[0].id)).toEqual([servers[0].id]);
    expect(await staleIds(fleets[1].id)).toEqual([]);
    // The other statuses leave it out: it is listed under one status only.
    expect(
      (await call("GET", `/v1/servers?fleet=${fleets[0].id}&status=realized`)).json.items.map(
        (s: { id: string }) => s.id,
      ),
    ).toEqual([servers[1].id]);

    // Already stale: the next tick writes nothing either, and it stays stale.
    const again = await d1Statements();
    await tick(now + 1000);
    expect((await d1Statements()).writes - again.writes).toBe(0);
    expect(await statusOf(servers[0].id)).toBe("stale");
  });

  it("is read the same way by the list, the check and the metrics: a realized server past its deadline is stale in each", async () => {
    const { forgetMetricsCache } = await import("../src/metrics/service");
    const f = await createFleet({ stale_after_s: 60 });
    const s = await registerServer(f.id);
    await call("PUT", "/v1/agent/inventory", { token: s.token, body: report(1, []) });
    expect(await statusOf(s.id)).toBe("realized");
    await env.DB.prepare("UPDATE servers SET last_seen = ?1, stale_at = ?1 + 60000 WHERE id = ?2")
      .bind(Date.now() - 120_000, s.id)
      .run();

    expect(await statusOf(s.id)).toBe("stale");
    const check = await call("GET", `/v1/check/server-agents?fleet=${f.id}`);
    expect(check.json.findings.map((x: { server: string; reason: string }) => [x.server, x.reason])).toEqual([
      [s.id, "stale_report"],
    ]);
    forgetMetricsCache();
    const metrics = (await call("GET", "/metrics")).json as string;
    expect(metrics).toContain(`harbormaster_servers{fleet="${f.id}",status="stale"} 1`);
    expect(metrics).not.toContain(`harbormaster_servers{fleet="${f.id}",status="realized"}`);
  });

  it("reads the stale servers fleet-wide through the indexes (the partial one on stale_at), never the whole servers table", async () => {
    const query = getDb(env.DB).select({ id: serversTable.id }).from(serversTable).where(isStale(Date.now())).toSQL();
    const plan = await env.DB.prepare(`EXPLAIN QUERY PLAN ${query.sql}`)
      .bind(...query.params)
      .all<{ detail: string }>();
    const detail = plan.results.map((r) => r.detail).join(" | ");
    expect(detail).toMatch(/USING INDEX servers_stale_at_idx/);
    expect(detail).not.toMatch(/SCAN servers(?! USING)/);
  });
});
