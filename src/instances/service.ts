import { and, asc, eq, getTableColumns, or, sql, type SQL } from "drizzle-orm";
import { getDb } from "../db/client";
import { agentInstances, servers } from "../db/schema";
import type { Env } from "../env";

/**
 * Agent instances from the fleet-wide index (one row per server and agent), by server, agent and
 * image (desired or reported), keyed by (server, agent), with the server's hostname; one more row
 * than `limit` when another page exists.
 */
export function searchInstances(
  env: Env,
  filter: { server?: string; agent?: string; image?: string },
  after: [server: string, agent: string] | null,
  limit: number,
) {
  const conds: SQL[] = [];
  if (filter.server) conds.push(eq(agentInstances.serverId, filter.server));
  if (filter.agent) conds.push(eq(agentInstances.agent, filter.agent));
  if (filter.image) conds.push(or(eq(agentInstances.desiredImage, filter.image), eq(agentInstances.reportedImage, filter.image))!);
  if (after) conds.push(sql`(${agentInstances.serverId}, ${agentInstances.agent}) > (${after[0]}, ${after[1]})`);
  return getDb(env.DB)
    .select({ ...getTableColumns(agentInstances), hostname: servers.hostname })
    .from(agentInstances)
    .leftJoin(servers, eq(servers.id, agentInstances.serverId))
    .where(conds.length ? and(...conds) : undefined)
    .orderBy(asc(agentInstances.serverId), asc(agentInstances.agent))
    .limit(limit + 1);
}
