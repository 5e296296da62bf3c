import { inVisibleFleets } from "../db/access";
/**
 * `check server-agents` (after sdcadm's): drift between what each server should run and
 * what it reports, answered from the D1 index. One finding per problem, each with the fix that
 * would address it; servers whose agents cannot be judged are listed as skipped, with why.
 */
import { z } from "@hono/zod-openapi";
import { and, asc, eq, gt, inArray, lt, ne, notInArray, sql, type SQL } from "drizzle-orm";
import type { Db } from "../db/client";
import { agentInstances, servers } from "../db/schema";
import { isoOrNull } from "../lib/time";
import { DRIFT_FIXES, DRIFT_REASONS, SERVER_STATUSES, type DriftReason } from "../domain/enums";
import { isStale, statusAt } from "../model/server/staleness";

export const driftReason = z.enum(DRIFT_REASONS);

/** What to do about a finding: issue the config again, ask the host to report, or nothing we can do. */
export const driftFix = z.enum(DRIFT_FIXES);

const FIX_OF: Record<DriftReason, { fix: z.infer<typeof driftFix>; advice: string }> = {
  missing: { fix: "reissue", advice: "re-plan and issue the next generation so the host installs the agent again" },
  image_mismatch: {
    fix: "reissue",
    advice: "re-plan and issue the next generation so the host converges on the desired image",
  },
  failed: { fix: "reissue", advice: "issue the next generation so the host retries; look at the host's error first" },
  removal_failed: {
    fix: "reissue",
    advice: "issue the next generation so the host retries the removal; look at the host's error first",
  },
  removal_pending: { fix: "refresh", advice: "ask the host to report again; it has not said the agent is gone" },
  generation_behind: {
    fix: "refresh",
    advice: "ask the host to report again; it has not reconciled the newest generation",
  },
  stale_report: {
    fix: "none",
    advice: "the host does not answer: check the machine; nothing is issued to a host that does not report",
  },
};

export const Finding = z
  .object({
    server: z.string(),
    hostname: z.string(),
    agent: z.string().nullable(),
    instance: z.string().nullable(),
    desired_image: z.string().nullable(),
    reported_image: z.string().nullable(),
    reason: driftReason,
    fix: driftFix,
    advice: z.string(),
  })
  .openapi("DriftFinding");

export const Skipped = z.object({ server: z.string(), hostname: z.string(), why: z.string() }).openapi("DriftSkipped");

export interface DriftFilter {
  fleet?: string;
  server?: string;
  agent?: string;
  /** The fleets the token may see (null: every fleet). */
  visible?: readonly string[] | null;
}

type ServerRow = Pick<
  typeof servers.$inferSelect,
  "id" | "fleetId" | "hostname" | "state" | "status" | "desiredGeneration" | "reportedGeneration" | "lastSeen"
>;
type InstanceRow = Pick<
  typeof agentInstances.$inferSelect,
  "serverId" | "agent" | "instanceId" | "desiredImage" | "reportedImage" | "reportedState" | "status"
>;

/** Pure: the findings and skip reason of one server, from its index rows. */
function judge(server: ServerRow, instances: InstanceRow[]) {
  const findings: z.infer<typeof Finding>[] = [];
  const base = { server: server.id, hostname: server.hostname };
  const finding = (reason: DriftReason, i?: InstanceRow) => ({
    ...base,
    agent: i?.agent ?? null,
    instance: i?.instanceId ?? null,
    desired_image: i?.desiredImage ?? null,
    reported_image: i?.reportedImage ?? null,
    reason,
    ...FIX_OF[reason],
  });
  if (server.state === "decommissioning" || server.state === "removed") {
    return { findings, skipped: { ...base, why: `${server.state}: its agents are being stopped, not checked` } };
  }
  if (server.status === "unknown") {
    return { findings, skipped: { ...base, why: "has not reported yet (provisioning)" } };
  }
  if (server.status === "stale") {
    findings.push(finding("stale_report"));
    return {
      findings,
      skipped: {
        ...base,
        why: `stale: no report since ${isoOrNull(server.lastSeen) ?? "ever"}; its agents were not checked`,
      },
    };
  }
  if (server.reportedGeneration !== null && server.reportedGeneration < server.desiredGeneration) {
    findings.push(finding("generation_behind"));
    // Its agents are pending on that generation: judged once the host has reconciled it.
    return { findings, skipped: null };
  }
  for (const i of instances) {
    let reason: DriftReason | null = null;
    if (i.status === "removal_pending" || i.status === "removal_failed") reason = i.status;
    else if (i.status === "failed") reason = "failed";
    else if (i.status === "drifted" || i.status === "pending") {
      if (i.reportedImage === null) reason = "missing";
      else if (i.reportedImage !== i.desiredImage) reason = "image_mismatch";
      else reason = "failed"; // the right image, not running
    }
    if (reason) findings.push(finding(reason, i));
  }
  return { findings, skipped: null };
}

/** Statuses whose servers the check always reads (realized ones only when decommissioning or stale). */
const NOT_REALIZED = SERVER_STATUSES.filter((s) => s !== "realized");

/**
 * One page of the check, paged by server (a page holds every finding of up to `limit` servers).
 * Realized servers have nothing to report and are never read: the servers query keeps to the
 * index's non-realized rows (and, with `agent`, to servers that have an instance of it).
 */
export async function checkServerAgents(
  db: Db,
  filter: DriftFilter,
  after: string | null,
  limit: number,
  now = Date.now(),
) {
  const shared: SQL[] = [];
  if (filter.server) shared.push(eq(servers.id, filter.server));
  const visible = inVisibleFleets(servers.fleetId, filter.visible ?? null);
  if (visible) shared.push(visible);
  if (filter.agent) {
    shared.push(
      sql`EXISTS (SELECT 1 FROM ${agentInstances} WHERE server_id = ${servers.id} AND agent = ${filter.agent})`,
    );
  }
  if (after) shared.push(gt(servers.id, after));
  const columns = {
    id: servers.id,
    fleetId: servers.fleetId,
    hostname: servers.hostname,
    state: servers.state,
    status: statusAt(now),
    desiredGeneration: servers.desiredGeneration,
    reportedGeneration: servers.reportedGeneration,
    lastSeen: servers.lastSeen,
  };
  let rows: ServerRow[];
  const fleet = filter.fleet;
  if (fleet && !filter.server) {
    // A fleet's page as three disjoint reads, each through the index that holds only its rows: the
    // servers not realized, the realized ones being decommissioned, and the realized ones past
    // their deadline (stale: src/model/server/staleness.ts). So a healthy fleet of 10,000 costs the few
    // that need a look, not a walk in id order through every realized server to find them (which
    // is what SQLite's planner picks for `ORDER BY id LIMIT` unless told: hence INDEXED BY).
    // Raw SQL: drizzle's builder has no INDEXED BY. Each column is named as the row type has it.
    const pick = sql`SELECT ${sql.join(
      Object.entries(columns).map(([name, column]) => sql`${column} AS ${sql.identifier(name)}`),
      sql`, `,
    )}`;
    const read = (index: string, ...conds: SQL[]) =>
      sql`${pick} FROM ${servers} INDEXED BY ${sql.identifier(index)} WHERE ${and(eq(servers.fleetId, fleet), ...conds, ...shared)}`;
    rows = await db.all<ServerRow>(
      sql`${read("servers_fleet_status_sort_idx", inArray(servers.status, NOT_REALIZED), ne(servers.state, "removed"))}
        UNION ALL ${read("servers_fleet_state_status_idx", eq(servers.state, "decommissioning"), sql`${servers.status} = 'realized'`)}
        UNION ALL ${read(
          "servers_stale_at_idx",
          // The partial index's own condition, as literal text so SQLite can match it.
          sql`${servers.status} != 'stale'`,
          sql`${servers.status} = 'realized'`,
          notInArray(servers.state, ["decommissioning", "removed"]),
          lt(servers.staleAt, now),
        )}
        ORDER BY id LIMIT ${limit + 1}`,
    );
  } else {
    // A realized server whose deadline passed is stale (src/model/server/staleness.ts), so it is read too.
    const conds: SQL[] = [
      ne(servers.state, "removed"),
      sql`(${servers.status} != 'realized' OR ${servers.state} = 'decommissioning' OR ${isStale(now)})`,
    ];
    if (filter.fleet) conds.push(eq(servers.fleetId, filter.fleet));
    rows = await db
      .select(columns)
      .from(servers)
      .where(and(...conds, ...shared))
      .orderBy(asc(servers.id))
      .limit(limit + 1);
  }
  const pageRows = rows.slice(0, limit);
  const ids = pageRows.map((r) => r.id);
  const instances = ids.length
    ? await db
        .select({
          serverId: agentInstances.serverId,
          agent: agentInstances.agent,
          instanceId: agentInstances.instanceId,
          desiredImage: agentInstances.desiredImage,
          reportedImage: agentInstances.reportedImage,
          reportedState: agentInstances.reportedState,
          status: agentInstances.status,
        })
        .from(agentInstances)
        .where(
          and(
            inArray(agentInstances.serverId, sql`(SELECT value FROM json_each(${JSON.stringify(ids)}))`),
            ne(agentInstances.status, "realized"),
            filter.agent ? eq(agentInstances.agent, filter.agent) : undefined,
          ),
        )
        .orderBy(asc(agentInstances.serverId), asc(agentInstances.agent))
    : [];
  const byServer = new Map<string, InstanceRow[]>();
  for (const i of instances) byServer.set(i.serverId, [...(byServer.get(i.serverId) ?? []), i]);
  const findings: z.infer<typeof Finding>[] = [];
  const skipped: z.infer<typeof Skipped>[] = [];
  for (const s of pageRows) {
    const out = judge(s, byServer.get(s.id) ?? []);
    findings.push(...out.findings);
    if (out.skipped) skipped.push(out.skipped);
  }
  return { findings, skipped, rows, pageRows };
}
