/**
 * A fleet's servers of one status, in hostname order (the console's list filtered by status, hm
 * status's lists of failed, stale and drifted servers), read the rows of that status through an
 * index, never every server of the fleet: at 10,000 servers with a handful failing, a page costs
 * about as many D1 rows as it returns.
 */
import { env } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import { getDb } from "../src/db/client";
import type { ServerStatus } from "../src/domain/enums";
import { listServers } from "../src/servers/store";
import { createFleet } from "./helpers";

describe("listing a fleet's servers by status", () => {
  it("reads the servers of that status, not the fleet, at 10,000 servers (stale: both the marked and the past-deadline ones)", async () => {
    const fleet = await createFleet();
    const other = await createFleet();
    const now = Date.now();
    // Mostly realized; 30 failed, 20 drifted, 10 marked stale by an older cron, 15 past their deadline.
    const seed = (id: string, n: number, tag: string) =>
      env.DB.prepare(
        `INSERT INTO servers (id, fleet_id, hostname, kind, roles, reboot_group, state, status, desired_generation, stale_at, created_at, updated_at)
         WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ${n})
         SELECT printf('00000000-0000-4000-${tag}-%012d', i), ?1, 'h' || i || '.example.com', 'managed', '[]', 'default', 'active',
                CASE WHEN i % 333 = 0 THEN 'failed' WHEN i % 500 = 1 THEN 'drifted' WHEN i % 1000 = 2 THEN 'stale' ELSE 'realized' END,
                1, CASE WHEN i % 666 = 3 THEN ?2 - 1000 ELSE ?2 + 3600000 END, ?2, ?2 FROM n`,
      )
        .bind(id, now)
        .run();
    await seed(fleet.id, 10_000, "a000");
    await seed(other.id, 1_000, "b000");

    const read = async (status: ServerStatus) => {
      const query = listServers(getDb(env.DB), { fleet: fleet.id, status }, null, 20, now);
      // The same statement again through the binding itself, whose answer carries D1's rows_read.
      const { sql, params } = query.toSQL();
      const { meta } = await env.DB.prepare(sql)
        .bind(...params)
        .all();
      return { rows: await query, rowsRead: meta.rows_read };
    };
    const failed = await read("failed");
    expect(failed.rows).toHaveLength(21);
    expect(failed.rows.every((r) => r.status === "failed")).toBe(true);
    const stale = await read("stale");
    expect(stale.rows).toHaveLength(21);
    expect(stale.rows.every((r) => r.status === "stale" && r.fleetId === fleet.id)).toBe(true);
    const drifted = await read("drifted");
    expect(drifted.rows.length).toBeGreaterThan(10);
    expect(drifted.rows.every((r) => r.status === "drifted")).toBe(true);
    // Before the status+hostname index and the stale union, each scanned the fleet's 10,000 rows.
    for (const r of [failed, stale, drifted]) expect(r.rowsRead).toBeLessThan(200);
  });
});
