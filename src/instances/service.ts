import { and, asc, eq, getTableColumns, or, sql, type SQL } from "drizzle-orm";
import { inVisibleFleets } from "../db/access";
import { getDb } from "../db/client";
import { agentInstances, servers } from "../db/schema";
import type { Env } from "../env";
import { labelConditions, type LabelTerm } from "../model/server/labels";

/**
 * Agent instances from the fleet-wide index (one row per server and agent), by server, agent and
 * image (desired or reported), in hostname order: keyed by (hostname, server, agent), so a page
 * boundary between two servers of the same hostname (in different fleets) stays exact. One more
 * row than `limit` when another page exists. Driven from the servers index by hostname
 * (servers_hostname_idx), each server's instances then in their primary-key order, so no sort.
 * An instance whose server row is missing is not listed: the ledger writes both in one batch.
 */
export function searchInstances(
  env: Env,
  filter: {
    server?: string;
    agent?: string;
    image?: string;
    labels?: LabelTerm[];
    /** The fleets the token may see (null: every fleet). */
    visible: readonly string[] | null;
  },
  after: [hostname: string, server: string, agent: string] | null,
  limit: number,
) {
  const conds: SQL[] = [];
  if (filter.server) conds.push(eq(agentInstances.serverId, filter.server));
  const visible = inVisibleFleets(servers.fleetId, filter.visible);
  if (visible) conds.push(visible);
  if (filter.agent) conds.push(eq(agentInstances.agent, filter.agent));
  if (filter.image)
    conds.push(or(eq(agentInstances.desiredImage, filter.image), eq(agentInstances.reportedImage, filter.image))!);
  conds.push(...labelConditions(filter.labels, servers.id));
  if (after)
    conds.push(
      sql`(${servers.hostname}, ${servers.id}, ${agentInstances.agent}) > (${after[0]}, ${after[1]}, ${after[2]})`,
    );
  return getDb(env.DB)
    .select({ ...getTableColumns(agentInstances), hostname: servers.hostname })
    .from(servers)
    .innerJoin(agentInstances, eq(agentInstances.serverId, servers.id))
    .where(conds.length ? and(...conds) : undefined)
    .orderBy(asc(servers.hostname), asc(servers.id), asc(agentInstances.agent))
    .limit(limit + 1);
}
