import { and, asc, gt, isNotNull, ne } from "drizzle-orm";
import { servers } from "../../db/schema";
import type { UpgradeStep } from "../step";
import { coordinatorOf } from "../../objects/stubs";

const ADOPT_CHUNK = 200;

/**
 * Until this release a coordinator that missed a server's identity looked the id up in D1 on the
 * host path; now identities reach it only from the ledgers' outboxes, and the host path never
 * reads D1. Servers registered before that may have an identity their coordinator never got:
 * hand each one over, unless the coordinator already knows that server (a ledger's delivery,
 * newer than the index, always wins). Changes no D1 row, so it is safe to re-run.
 */
export const adoptFleetlockIdentities: UpgradeStep = {
  version: 2,
  description: "Hand every registered FleetLock identity the coordinators have not heard of to its fleet's coordinator",
  async chunk({ db, env }, cursor) {
    const rows = await db
      .select({
        id: servers.id,
        fleetId: servers.fleetId,
        fleetlockId: servers.fleetlockId,
        hostname: servers.hostname,
        rebootGroup: servers.rebootGroup,
      })
      .from(servers)
      .where(
        and(isNotNull(servers.fleetlockId), ne(servers.state, "removed"), cursor ? gt(servers.id, cursor) : undefined),
      )
      .orderBy(asc(servers.id))
      .limit(ADOPT_CHUNK);
    for (const r of rows) {
      await coordinatorOf(env, r.fleetId).adoptIdentity(r.id, {
        fleetlock_id: r.fleetlockId,
        hostname: r.hostname,
        reboot_group: r.rebootGroup,
        rev: 0,
      });
    }
    return { statements: [], next: rows.length < ADOPT_CHUNK ? null : rows[rows.length - 1].id };
  },
};
