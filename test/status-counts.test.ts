/**
 * `hm status` (GET /v1/status) and the console's overview (GET /v1/fleets/{fleet}/summary) count a
 * fleet's servers through one aggregate (src/status/counts.ts): the two answers must agree on
 * every count, whatever mix of states, statuses, deadlines passed and tombstones the fleet holds.
 */
import { env } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import { call, createFleet } from "./helpers";

const nonZero = (counts: Record<string, number>, except?: string) =>
  Object.fromEntries(Object.entries(counts).filter(([k, n]) => n > 0 && k !== except));

describe("server counts shared by hm status and the console's overview", () => {
  it("agree on total, by status and by state, with removed servers, passed deadlines and old stale marks in the fleet", async () => {
    const fleet = await createFleet();
    const now = Date.now();
    // 300 rows: every tenth removed, every seventh past its stale_at deadline, every thirteenth
    // marked `stale` by an older release's cron, the rest spread over statuses and states.
    await env.DB.prepare(
      `INSERT INTO servers (id, fleet_id, hostname, kind, roles, reboot_group, state, status, desired_generation, stale_at, created_at, updated_at)
       WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 300)
       SELECT printf('00000000-0000-4000-9000-%012d', i), ?1, 'c' || i || '.example.com', 'managed', '[]', 'default',
              CASE WHEN i % 10 = 0 THEN 'removed' WHEN i % 11 = 0 THEN 'decommissioning' WHEN i % 3 = 0 THEN 'provisioning' ELSE 'active' END,
              CASE WHEN i % 13 = 0 THEN 'stale' ELSE (CASE i % 5 WHEN 0 THEN 'realized' WHEN 1 THEN 'pending' WHEN 2 THEN 'failed' WHEN 3 THEN 'drifted' ELSE 'unknown' END) END,
              1, CASE WHEN i % 7 = 0 THEN ?2 - 1000 ELSE ?2 + 3600000 END, ?2, ?2 FROM n`,
    )
      .bind(fleet.id, now)
      .run();

    const status = (await call("GET", `/v1/status?fleet=${fleet.id}&attention=200`)).json.fleets[0];
    const summary = (await call("GET", `/v1/fleets/${fleet.id}/summary`)).json;

    expect(summary.servers.total).toBe(270);
    expect(summary.servers.by_state.removed).toBe(30);
    expect(summary.servers.by_status.stale).toBeGreaterThan(0);
    expect(status.servers.total).toBe(summary.servers.total);
    expect(status.servers.by_status).toEqual(nonZero(summary.servers.by_status));
    expect(status.servers.by_state).toEqual(nonZero(summary.servers.by_state, "removed"));
    // Each list of servers that need a look holds exactly the servers its count counts.
    for (const a of status.attention) {
      expect(a.count).toBe(summary.servers.by_status[a.status]);
      expect(a.items).toHaveLength(a.count);
    }
  });
});
