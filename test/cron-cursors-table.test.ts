/**
 * cron_cursors is a WITHOUT ROWID table (migration 0026): a cursor row is written once, not once
 * as a row and once more as its primary key's index entry. Measured on the audit events' batch
 * claim and its release, the writes every drain tick with rows makes to the table.
 */
import { env } from "cloudflare:test";
import { describe, expect, it } from "vitest";

const MIGRATION = "0026_cron_cursors_without_rowid.sql";

/** The batch claim as src/audit/events.service.ts sends it, and the release that ends the batch. */
async function claimAndRelease(upTo: number) {
  const claim = await env.DB.prepare(
    `INSERT INTO cron_cursors (name, at) SELECT 'probe_batch', ?1 WHERE EXISTS
       (SELECT 1 FROM cron_cursors WHERE name = 'probe' AND at = 1) ON CONFLICT DO NOTHING RETURNING at`,
  )
    .bind(upTo)
    .all();
  expect(claim.results).toEqual([{ at: upTo }]);
  const release = await env.DB.prepare("DELETE FROM cron_cursors WHERE name = 'probe_batch' AND at = ?1")
    .bind(upTo)
    .run();
  return { claim: claim.meta.rows_written, release: release.meta.rows_written };
}

const tableSql = async () =>
  (await env.DB.prepare("SELECT sql FROM sqlite_master WHERE type = 'table' AND name = 'cron_cursors'").first<{
    sql: string;
  }>())!.sql;

describe("cron_cursors", () => {
  it("writes one row per batch claim (the rowid table it replaces wrote two) and one per release, keeping its rows", async () => {
    expect(await tableSql()).toMatch(/WITHOUT ROWID/);
    await env.DB.prepare("INSERT INTO cron_cursors (name, at) VALUES ('probe', 1)").run();
    const after = await claimAndRelease(10);

    // The table as 0012 made it, with rows the cron had written.
    await env.DB.batch([
      env.DB.prepare("DROP TABLE cron_cursors"),
      env.DB.prepare("CREATE TABLE `cron_cursors` (`name` text PRIMARY KEY NOT NULL, `at` integer NOT NULL)"),
      env.DB.prepare("INSERT INTO cron_cursors (name, at) VALUES ('probe', 1), ('stale_events', 42)"),
    ]);
    const before = await claimAndRelease(11);
    console.log(
      `cron_cursors rows written per claim/release: rowid ${JSON.stringify(before)}, WITHOUT ROWID ${JSON.stringify(after)}`,
    );
    expect(before).toEqual({ claim: 2, release: 1 });
    expect(after).toEqual({ claim: 1, release: 1 });

    // The migration over that table: the same rows, in the new shape.
    const migration = env.TEST_MIGRATIONS.find((m) => m.name === MIGRATION)!;
    await env.DB.batch(migration.queries.map((q) => env.DB.prepare(q)));
    expect(await tableSql()).toMatch(/WITHOUT ROWID/);
    const rows = await env.DB.prepare("SELECT name, at FROM cron_cursors ORDER BY name").all();
    expect(rows.results).toEqual([
      { name: "probe", at: 1 },
      { name: "stale_events", at: 42 },
    ]);
    expect(await claimAndRelease(12)).toEqual({ claim: 1, release: 1 });
  });
});
