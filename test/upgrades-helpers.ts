import { env } from "cloudflare:test";
import { integer, sqliteTable } from "drizzle-orm/sqlite-core";
import type { UpgradeStep } from "../src/upgrades/step";

/** Puts the upgrade bookkeeping back to "data at `version`, nothing ever ran". */
export async function resetUpgrades(version: number) {
  await env.DB.batch([
    env.DB.prepare("DELETE FROM upgrade_runs"),
    env.DB.prepare("DELETE FROM upgrade_steps"),
    env.DB.prepare(
      "UPDATE upgrade_state SET version = ?, cursor_version = NULL, cursor = NULL, written_by_run = 0 WHERE id = 1",
    ).bind(version),
  ]);
}

export async function dataVersion() {
  return (await env.DB.prepare("SELECT version FROM upgrade_state WHERE id = 1").first<number>("version"))!;
}

export async function attempts() {
  return (await env.DB.prepare("SELECT * FROM upgrade_steps ORDER BY id").all<Record<string, any>>()).results;
}

export async function runs() {
  return (await env.DB.prepare("SELECT * FROM upgrade_runs ORDER BY id").all<Record<string, any>>()).results;
}

/** The scratch table as drizzle sees it, for steps that write to it. */
export const upgradeProbe = sqliteTable("upgrade_probe", {
  step: integer("step").notNull(),
  n: integer("n").notNull(),
});

/** A scratch table a test step writes to, so its effects can be counted. */
export async function probeTable() {
  await env.DB.exec("CREATE TABLE IF NOT EXISTS upgrade_probe (step INTEGER NOT NULL, n INTEGER NOT NULL)");
  await env.DB.exec("DELETE FROM upgrade_probe");
}

export async function probeRows() {
  return (await env.DB.prepare("SELECT step, n FROM upgrade_probe ORDER BY rowid").all<{ step: number; n: number }>())
    .results;
}

/** A step that records one probe row per chunk, `chunks` chunks long. */
export function probeStep(
  version: number,
  opts: { chunks?: number; delayMs?: number; failAtChunk?: () => number | null } = {},
): UpgradeStep {
  const total = opts.chunks ?? 1;
  return {
    version,
    description: `probe step ${version}`,
    async chunk({ db }, cursor) {
      const n = cursor ? Number(cursor) + 1 : 1;
      if (opts.delayMs) await new Promise((r) => setTimeout(r, opts.delayMs));
      if (opts.failAtChunk?.() === n) throw new Error(`probe step ${version} broke at chunk ${n}`);
      return {
        statements: [db.insert(upgradeProbe).values({ step: version, n })],
        next: n < total ? String(n) : null,
      };
    },
  };
}
