import { and, asc, eq, gt } from "drizzle-orm";
import { servers } from "../../db/schema";
import { hostnameSortKey } from "../../model/server/hostname-order";
import type { UpgradeStep } from "../step";

/** Rows per chunk: one UPDATE each, in one D1 batch. */
const SORT_KEY_CHUNK = 100;

/**
 * `GET /v1/servers` pages by `hostname_sort` (natural order). The ledgers' projections write it with
 * the hostname, but only when the hostname moves, and a silent host's ledger may never load again:
 * rows indexed before the column existed get their key here. Each UPDATE re-checks at commit that
 * the row still has no key and the same hostname, so a projection that wrote it meanwhile wins.
 */
export const giveServersSortKeys: UpgradeStep = {
  version: 3,
  description: "Give every indexed server its natural sort key (servers list in natural order)",
  async chunk({ db }, cursor) {
    const rows = await db
      .select({ id: servers.id, hostname: servers.hostname })
      .from(servers)
      .where(and(eq(servers.hostnameSort, ""), cursor ? gt(servers.id, cursor) : undefined))
      .orderBy(asc(servers.id))
      .limit(SORT_KEY_CHUNK);
    return {
      statements: rows.map((r) =>
        db
          .update(servers)
          .set({ hostnameSort: hostnameSortKey(r.hostname) })
          .where(and(eq(servers.id, r.id), eq(servers.hostname, r.hostname), eq(servers.hostnameSort, ""))),
      ),
      next: rows.length < SORT_KEY_CHUNK ? null : rows[rows.length - 1].id,
    };
  },
};
