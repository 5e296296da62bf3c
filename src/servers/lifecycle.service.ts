/**
 * Server lifecycle workflows (issue 8): decommission (and force, cancel) and token rotation. The
 * server's ledger owns each fact and commits first; its outbox and cleanup timer bring the index,
 * the token row and the fleet's coordinator along.
 */
import { and, asc, eq, gt, notInArray } from "drizzle-orm";
import { issueToken } from "../auth/tokens";
import { getDb } from "../db/client";
import { servers } from "../db/schema";
import { getFleet } from "../fleets/store";
import type { Env } from "../env";
import { notFound, unwrap } from "../http/errors";
import { ledgerOf } from "../objects/stubs";

export async function decommissionServer(env: Env, actor: string, id: string, opts: { force?: { reason: string } }) {
  return unwrap(await ledgerOf(env, id).decommission({ actor, force: opts.force }));
}

export async function cancelDecommission(env: Env, actor: string, id: string) {
  return unwrap(await ledgerOf(env, id).cancelDecommission(actor));
}

/** A new token for the server, answered once; the old one stops working at once. */
export async function rotateServerToken(env: Env, actor: string, id: string) {
  const ledger = ledgerOf(env, id);
  if (!(await ledger.view())) throw notFound("server", id);
  const { token, hash } = await issueToken("server", id);
  const out = unwrap(await ledger.rotateToken(hash, actor));
  return { view: out.view, token };
}

export async function refreshServer(env: Env, actor: string, id: string) {
  return unwrap(await ledgerOf(env, id).requestRefresh(actor));
}

const REFRESH_PARALLEL = 16;

/**
 * Refresh for a fleet: every server of one page of the fleet's index (not removed or being
 * removed) is asked to report again. Paged, so a large fleet is asked in bounded steps.
 */
export async function refreshFleet(env: Env, actor: string, fleet: string, after: string | null, limit: number) {
  const db = getDb(env.DB);
  if (!(await getFleet(db, fleet))) throw notFound("fleet", fleet);
  const rows = await db
    .select({ id: servers.id })
    .from(servers)
    .where(
      and(
        eq(servers.fleetId, fleet),
        notInArray(servers.state, ["removed", "decommissioning"]),
        after ? gt(servers.id, after) : undefined,
      ),
    )
    .orderBy(asc(servers.id))
    .limit(limit + 1);
  const ids = rows.slice(0, limit).map((r) => r.id);
  const failed: string[] = [];
  let next = 0;
  await Promise.all(
    Array.from({ length: Math.min(REFRESH_PARALLEL, ids.length) }, async () => {
      while (next < ids.length) {
        const id = ids[next++];
        try {
          const out = await ledgerOf(env, id).requestRefresh(actor);
          if (!out.ok) failed.push(id);
        } catch {
          failed.push(id);
        }
      }
    }),
  );
  return { rows, requested: ids.length - failed.length, failed };
}
