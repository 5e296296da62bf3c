import { desc, eq, lt } from "drizzle-orm";
import type { Db } from "../db/client";
import { upgradeRuns, upgradeState, upgradeSteps } from "../db/schema";

export type UpgradeStateRow = typeof upgradeState.$inferSelect;
export type RunRow = typeof upgradeRuns.$inferSelect;

/** Raised when the upgrade tables are missing: the code was deployed before its D1 migrations. */
export class MigrationsPending extends Error {
  constructor() {
    super("the upgrade tables are missing: apply the D1 migrations (wrangler d1 migrations apply)");
  }
}

const isMissingTable = (err: unknown) => {
  const text = err instanceof Error ? `${err.message} ${(err as { cause?: Error }).cause?.message ?? ""}` : String(err);
  return /no such table: upgrade_/i.test(text);
};

export async function readUpgradeState(db: Db): Promise<UpgradeStateRow> {
  let row: UpgradeStateRow | undefined;
  try {
    row = await db.query.upgradeState.findFirst({ where: eq(upgradeState.id, 1) });
  } catch (err) {
    if (isMissingTable(err)) throw new MigrationsPending();
    throw err;
  }
  // Migration 0001 inserts the row; without it the version is unknown and nothing may run.
  if (!row) throw new MigrationsPending();
  return row;
}

export const currentHolder = (db: Db) => db.query.upgradeRuns.findFirst({ where: eq(upgradeRuns.state, "running") });

export const latestRun = (db: Db) => db.query.upgradeRuns.findFirst({ orderBy: desc(upgradeRuns.id) });

/** Step attempts, newest first; `before` is the id the previous page ended on. */
export const listAttempts = (db: Db, before: number | null, limit: number) =>
  db
    .select()
    .from(upgradeSteps)
    .where(before != null ? lt(upgradeSteps.id, before) : undefined)
    .orderBy(desc(upgradeSteps.id))
    .limit(limit + 1);
