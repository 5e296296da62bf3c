import { and, asc, eq, gt, isNotNull, sql } from "drizzle-orm";
import { servers } from "../../db/schema";
import type { UpgradeStep } from "../step";

/** Rows per chunk: one bound JSON list, so D1's 100-parameter limit never applies. */
export const ACTIVATE_CHUNK = 200;

/**
 * The foundation release left a server `provisioning` after it reported; since then the first
 * report activates it. Hosts that reported before that and have not reported since are still
 * `provisioning` in the index, and their ledgers never load to correct it (the ledger's own
 * storage format step does the same for its record when it does load).
 *
 * The one writer of `servers.state` besides the ledgers' projections, by design: an upgrade step
 * is a data migration, applied once, and it only ever writes what the ledger's format-2 step
 * makes true of the ledger too (a server that reported is not provisioning), re-checked at commit.
 */
export const activateReportedServers: UpgradeStep = {
  version: 1,
  description: "Mark servers that have already reported as active (they were left provisioning)",
  async chunk({ db, now }, cursor) {
    const rows = await db
      .select({ id: servers.id })
      .from(servers)
      .where(
        and(
          eq(servers.state, "provisioning"),
          isNotNull(servers.reportedGeneration),
          cursor ? gt(servers.id, cursor) : undefined,
        ),
      )
      .orderBy(asc(servers.id))
      .limit(ACTIVATE_CHUNK);
    if (rows.length === 0) return { statements: [], next: null };
    const ids = rows.map((r) => r.id);
    return {
      statements: [
        db
          .update(servers)
          .set({ state: "active", updatedAt: now })
          .where(
            and(
              sql`${servers.id} IN (SELECT value FROM json_each(${JSON.stringify(ids)}))`,
              // Re-checked at commit: a row changed since the read is left to its ledger.
              eq(servers.state, "provisioning"),
              isNotNull(servers.reportedGeneration),
            ),
          ),
      ],
      next: rows.length < ACTIVATE_CHUNK ? null : ids[ids.length - 1],
    };
  },
};
