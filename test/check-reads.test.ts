/**
 * The drift check of one fleet (the console's drift page, `hm check server-agents --fleet`) reads
 * the servers that need a look — not realized, decommissioning, past their deadline — never the
 * realized ones in between: at 10,000 servers with 2% drifting, a page costs about what it returns.
 */
import { env } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import { checkServerAgents } from "../src/check/drift";
import { getDb } from "../src/db/client";
import { d1RowsInto } from "../src/local/d1-taps";
import { createFleet } from "./helpers";

describe("the drift check of a large, healthy fleet", () => {
  it("reads the servers that need a look, not the fleet, and pages through all of them in id order", async () => {
    const fleet = await createFleet();
    const now = Date.now();
    // 10,000 servers: 1% failed, 1% drifted, 30 decommissioning (realized), 25 realized past their deadline.
    await env.DB.prepare(
      `INSERT INTO servers (id, fleet_id, hostname, kind, roles, reboot_group, state, status, desired_generation, reported_generation, stale_at, created_at, updated_at)
       WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 10000)
       SELECT printf('00000000-0000-4000-d000-%012d', i), ?1, 'h' || i || '.example.com', 'managed', '[]', 'default',
              CASE WHEN i % 333 = 7 THEN 'decommissioning' ELSE 'active' END,
              CASE WHEN i % 100 = 1 THEN 'failed' WHEN i % 100 = 2 THEN 'drifted' ELSE 'realized' END,
              1, 1, CASE WHEN i % 400 = 5 THEN ?2 - 1000 ELSE ?2 + 3600000 END, ?2, ?2 FROM n`,
    )
      .bind(fleet.id, now)
      .run();
    const rows = { statements: 0, rowsRead: 0, rowsWritten: 0 };
    const db = getDb(d1RowsInto(env.DB, rows));

    const first = await checkServerAgents(db, { fleet: fleet.id }, null, 50, now);
    expect(first.pageRows).toHaveLength(50);
    // Before: a walk in id order through the realized servers, ~2,500 rows to find 50 of these.
    expect(rows.rowsRead).toBeLessThan(1000);

    const seen: string[] = [];
    let after: string | null = null;
    for (;;) {
      const page = await checkServerAgents(db, { fleet: fleet.id }, after, 50, now);
      seen.push(...page.pageRows.map((r) => r.id));
      if (page.rows.length <= 50) break;
      after = page.pageRows.at(-1)!.id;
    }
    expect(seen).toEqual([...seen].sort());
    expect(new Set(seen).size).toBe(seen.length);
    // failed + drifted (200), decommissioning (30, minus the 1 that is also failed or drifted), stale (25, minus overlaps).
    const expected = await env.DB.prepare(
      `SELECT count(*) AS n FROM servers WHERE fleet_id = ?1 AND state != 'removed' AND (status != 'realized' OR state = 'decommissioning' OR stale_at < ?2)`,
    )
      .bind(fleet.id, now)
      .first<{ n: number }>();
    expect(seen).toHaveLength(expected!.n);
  });
});
