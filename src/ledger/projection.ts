import { and, eq, sql } from "drizzle-orm";
import type { Db } from "../db/client";
import { agentInstances, servers } from "../db/schema";
import type { DesiredState } from "./desired";
import type { ServerRecord } from "./record";
import type { StoredReport } from "./schemas";
import { computeStatus } from "./status";

/** How often an otherwise unchanged report refreshes `last_seen` in D1 (DESIGN §8). */
export const LAST_SEEN_REFRESH_MS = 5 * 60_000;

export function lastSeenRefreshMs(staleAfterS: number) {
  // Refresh well inside stale-after, so a server that keeps reporting is never marked stale.
  return Math.min(LAST_SEEN_REFRESH_MS, (staleAfterS * 1000) / 2);
}

export interface Projection {
  /** Everything the index shows except last_seen; equal signatures mean no D1 write is needed. */
  signature: string;
  server: typeof servers.$inferInsert;
  instances: (typeof agentInstances.$inferInsert)[];
}

export function buildProjection(
  record: ServerRecord,
  desired: DesiredState,
  report: StoredReport | undefined,
  now: number,
): Projection {
  // A report just arrived or nothing changed in time: the index never stores "stale" from here;
  // the cron marks it from last_seen (DESIGN §2), and the next projection overwrites it.
  const computed = computeStatus(desired, report, now, Number.POSITIVE_INFINITY);
  const instances = computed.agents.map((a) => ({
    serverId: record.id,
    agent: a.name,
    fleetId: record.fleet_id,
    instanceId: a.desired?.instance_id ?? a.reported?.instance_id ?? null,
    desiredImage: a.desired?.image ?? null,
    desiredVersion: a.desired?.version ?? null,
    reportedImage: a.reported?.image ?? null,
    reportedVersion: a.reported?.version ?? null,
    reportedState: a.reported?.state ?? null,
    status: a.status,
    updatedAt: now,
  }));
  const server = {
    id: record.id,
    fleetId: record.fleet_id,
    hostname: record.hostname,
    kind: record.kind,
    roles: record.roles,
    rebootGroup: record.reboot_group,
    fleetlockId: record.fleetlock_id,
    state: record.state,
    status: computed.status,
    desiredGeneration: desired.generation,
    reportedGeneration: report?.generation ?? null,
    bootId: report?.boot_id ?? null,
    lastSeen: report?.received_at ?? null,
    createdAt: record.created_at,
    updatedAt: now,
  };
  const { updatedAt: _u, lastSeen: _l, ...shown } = server;
  const signature = JSON.stringify([shown, instances.map(({ updatedAt: _x, ...rest }) => rest)]);
  return { signature, server, instances };
}

/** Writes the whole projection of one server in one D1 batch (atomic). */
export async function writeProjection(db: Db, p: Projection) {
  const names = p.instances.map((i) => i.agent);
  const { id: _id, createdAt: _c, ...serverUpdate } = p.server;
  const stmts = [
    db.insert(servers).values(p.server).onConflictDoUpdate({ target: servers.id, set: serverUpdate }),
    // One bound parameter for the whole list: D1 allows at most 100 per statement.
    db
      .delete(agentInstances)
      .where(
        and(
          eq(agentInstances.serverId, p.server.id),
          sql`${agentInstances.agent} NOT IN (SELECT value FROM json_each(${JSON.stringify(names)}))`,
        ),
      ),
  ] as const;
  const upserts = chunk(p.instances, INSTANCE_ROWS_PER_STATEMENT).map((rows) =>
        db
          .insert(agentInstances)
          .values(rows)
          .onConflictDoUpdate({
            target: [agentInstances.serverId, agentInstances.agent],
            set: {
              instanceId: sql`excluded.instance_id`,
              desiredImage: sql`excluded.desired_image`,
              desiredVersion: sql`excluded.desired_version`,
              reportedImage: sql`excluded.reported_image`,
              reportedVersion: sql`excluded.reported_version`,
              reportedState: sql`excluded.reported_state`,
              status: sql`excluded.status`,
              updatedAt: sql`excluded.updated_at`,
            },
          }),
  );
  await db.batch([...stmts, ...upserts]);
}

/** 11 columns a row; D1 binds at most 100 parameters per statement. */
const INSTANCE_ROWS_PER_STATEMENT = 9;

function chunk<T>(items: T[], size: number): T[][] {
  const out: T[][] = [];
  for (let i = 0; i < items.length; i += size) out.push(items.slice(i, i + size));
  return out;
}

/**
 * A last_seen refresh alone: one small UPDATE. It rewrites the status too, because the cron may
 * have marked the row stale while the host was silent.
 */
export async function writeLastSeen(db: Db, p: Projection) {
  await db
    .update(servers)
    .set({ lastSeen: p.server.lastSeen, status: p.server.status })
    .where(eq(servers.id, p.server.id));
}
