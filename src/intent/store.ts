import { and, asc, desc, eq, lt, sql } from "drizzle-orm";
import type { Db } from "../db/client";
import { agentChannelHistory, agentChannels, roleProfiles } from "../db/schema";
import { iso } from "../lib/time";
import type { StrategyInput } from "../model/strategy";

export type ChannelRow = typeof agentChannels.$inferSelect;
export type RoleRow = typeof roleProfiles.$inferSelect;

export const channelView = (r: ChannelRow) => ({
  fleet: r.fleetId,
  agent: r.agent,
  image: r.image,
  version: r.version,
  image_id: r.catalog?.image_id ?? null,
  rollout: (r.rollout as { strategy: StrategyInput } | null) ?? null,
  updated_at: iso(r.updatedAt),
  updated_by: r.updatedBy,
});

export const roleView = (r: RoleRow) => ({
  fleet: r.fleetId,
  role: r.role,
  agents: r.agents,
  updated_at: iso(r.updatedAt),
  updated_by: r.updatedBy,
});

export const getChannel = (db: Db, fleet: string, agent: string) =>
  db.query.agentChannels.findFirst({ where: and(eq(agentChannels.fleetId, fleet), eq(agentChannels.agent, agent)) });

export const listChannels = (db: Db, fleet: string, after: string | null, limit: number) =>
  db
    .select()
    .from(agentChannels)
    .where(and(eq(agentChannels.fleetId, fleet), after ? sql`${agentChannels.agent} > ${after}` : undefined))
    .orderBy(asc(agentChannels.agent))
    .limit(limit + 1);

/** Newest first. */
export const channelHistory = (db: Db, fleet: string, agent: string, before: number | null, limit: number) =>
  db
    .select()
    .from(agentChannelHistory)
    .where(
      and(
        eq(agentChannelHistory.fleetId, fleet),
        eq(agentChannelHistory.agent, agent),
        before ? lt(agentChannelHistory.id, before) : undefined,
      ),
    )
    .orderBy(desc(agentChannelHistory.id))
    .limit(limit + 1);

export const getRole = (db: Db, fleet: string, role: string) =>
  db.query.roleProfiles.findFirst({ where: and(eq(roleProfiles.fleetId, fleet), eq(roleProfiles.role, role)) });

export const listRoles = (db: Db, fleet: string, after: string | null, limit: number) =>
  db
    .select()
    .from(roleProfiles)
    .where(and(eq(roleProfiles.fleetId, fleet), after ? sql`${roleProfiles.role} > ${after}` : undefined))
    .orderBy(asc(roleProfiles.role))
    .limit(limit + 1);

/** The agents among `names` that have no channel in the fleet. */
export async function agentsWithoutChannel(db: Db, fleet: string, names: string[]) {
  if (names.length === 0) return [];
  const rows = await db
    .select({ agent: agentChannels.agent })
    .from(agentChannels)
    .where(
      and(
        eq(agentChannels.fleetId, fleet),
        sql`${agentChannels.agent} IN (SELECT value FROM json_each(${JSON.stringify(names)}))`,
      ),
    );
  const have = new Set(rows.map((r) => r.agent));
  return names.filter((n) => !have.has(n));
}
