import type { CatalogFields } from "../domain/images";
/**
 * The statements that write fleet intent rows (channels, role profiles), for the batches of this
 * feature's service and of a fleet spec's apply (src/specs/): one writer of these rows, whichever
 * workflow commits them. Each goes into a batch with the fleet's intent revision bump.
 */
import { sql } from "drizzle-orm";
import type { Db } from "../db/client";
import { agentChannelHistory, agentChannels, fleets, roleProfiles } from "../db/schema";
import type { RoleAgent } from "../planner/plan";

/** A channel's new image: its history row and the channel row. */
export function channelWrite(
  db: Db,
  actor: string,
  fleet: string,
  agent: string,
  input: { image: string; version: string; catalog?: CatalogFields | null },
  previous: { image: string; version: string } | null,
  now: number,
) {
  const catalog = input.catalog ?? null;
  return [
    db.insert(agentChannelHistory).values({
      fleetId: fleet,
      agent,
      image: input.image,
      version: input.version,
      previousImage: previous?.image ?? null,
      previousVersion: previous?.version ?? null,
      at: now,
      actor,
    }),
    db
      .insert(agentChannels)
      .values({
        fleetId: fleet,
        agent,
        image: input.image,
        version: input.version,
        catalog,
        updatedAt: now,
        updatedBy: actor,
      })
      .onConflictDoUpdate({
        target: [agentChannels.fleetId, agentChannels.agent],
        set: { image: input.image, version: input.version, catalog, updatedAt: now, updatedBy: actor },
      }),
  ] as const;
}

/**
 * A channel's default rollout (a fleet spec's `channels.<agent>.rollout`; null: none), after the
 * channel's own write in the same batch. It changes no image: no history row, nobody re-planned.
 */
export const channelRolloutWrite = (
  db: Db,
  actor: string,
  fleet: string,
  agent: string,
  rollout: { strategy: unknown } | null,
  now: number,
) =>
  db
    .update(agentChannels)
    .set({ rollout, updatedAt: now, updatedBy: actor })
    .where(sql`${agentChannels.fleetId} = ${fleet} AND ${agentChannels.agent} = ${agent}`);

/** A channel no spec declares any more (its history stays, so a channel put back goes on from it). */
export const channelDelete = (db: Db, fleet: string, agent: string) =>
  db.delete(agentChannels).where(sql`${agentChannels.fleetId} = ${fleet} AND ${agentChannels.agent} = ${agent}`);

/** A role profile, created or replaced. */
export const roleWrite = (db: Db, actor: string, fleet: string, role: string, agents: RoleAgent[], now: number) =>
  db
    .insert(roleProfiles)
    .values({ fleetId: fleet, role, agents, updatedAt: now, updatedBy: actor })
    .onConflictDoUpdate({
      target: [roleProfiles.fleetId, roleProfiles.role],
      set: { agents, updatedAt: now, updatedBy: actor },
    });

export const roleDelete = (db: Db, fleet: string, role: string) =>
  db.delete(roleProfiles).where(sql`${roleProfiles.fleetId} = ${fleet} AND ${roleProfiles.role} = ${role}`);

/** Role agents as stored: without absent `when`s, so equal profiles compare equal. */
export const storedAgents = (agents: readonly { name: string; when?: string }[]): RoleAgent[] =>
  agents.map((a) => (a.when === undefined ? { name: a.name } : { name: a.name, when: a.when }));

/** The fleet row's settings and capabilities a fleet spec changes (the others stay). */
export const fleetSettingsWrite = (
  db: Db,
  fleet: string,
  set: Partial<
    Pick<
      typeof fleets.$inferInsert,
      | "capabilities"
      | "staleAfterS"
      | "lockTtlS"
      | "allowUnknownIds"
      | "defaultGroupSlots"
      | "disruptionBudget"
      | "imagePolicy"
    >
  >,
) =>
  db
    .update(fleets)
    .set(set)
    .where(sql`${fleets.id} = ${fleet}`);
