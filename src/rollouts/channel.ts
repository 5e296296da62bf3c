/**
 * update_channel: the fleet's channel for the agent (docs/operator-guide.md) moves to the rollout's image when
 * the rollout starts, so servers registered meanwhile are set up with it, and moves back when the
 * rollout is rolled back. A channel change by itself moves no server that already runs the agent
 * (that is the rollout's work): so the rollback also writes back the servers that took the
 * rollout's image from the channel meanwhile (serversAtImage). Both moves are delivered from the Rollout object's outbox, so each
 * may run more than once: they are written to give the same result when repeated.
 */
import { and, asc, desc, eq, notInArray } from "drizzle-orm";
import { getDb } from "../db/client";
import { agentChannelHistory, agentInstances, servers } from "../db/schema";
import type { Env } from "../env";
import { getChannel } from "../intent/store";
import { putChannel } from "../intent/service";
import type { CatalogFields } from "../domain/images";
import { imageByNameVersion } from "../images/store";
import { catalogFieldsOf } from "../images/service";

export interface ChannelImage {
  image: string;
  version: string;
  catalog?: CatalogFields | null;
}

export interface ChannelMove {
  /** The channel points at the rollout's image. */
  updated: boolean;
  /** The channel before the rollout moved it (what a rollback restores); null when there was none. */
  previous: ChannelImage | null;
}

/** Points the channel at `to`; answers what it pointed at before this rollout (`actor`) moved it. */
export async function moveChannel(
  env: Env,
  fleet: string,
  agent: string,
  to: ChannelImage,
  actor: string,
): Promise<ChannelMove> {
  const db = getDb(env.DB);
  const current = await getChannel(db, fleet, agent);
  if (current && current.image === to.image && current.version === to.version) {
    // Already there: moved by an earlier delivery of this same move, or by someone else before.
    const mine = await db
      .select()
      .from(agentChannelHistory)
      .where(
        and(
          eq(agentChannelHistory.fleetId, fleet),
          eq(agentChannelHistory.agent, agent),
          eq(agentChannelHistory.actor, actor),
        ),
      )
      .orderBy(desc(agentChannelHistory.id))
      .limit(1);
    const row = mine[0];
    const previous =
      row?.previousImage && row.previousVersion ? { image: row.previousImage, version: row.previousVersion } : null;
    return { updated: true, previous: row ? previous : { image: current.image, version: current.version } };
  }
  await putChannel(db, actor, fleet, agent, to);
  return { updated: true, previous: current ? { image: current.image, version: current.version } : null };
}

/**
 * Rollback: the channel goes back to `previous`, only while it still points at the rollout's image
 * (an operator who has moved it since keeps their choice).
 */
export async function restoreChannel(
  env: Env,
  fleet: string,
  agent: string,
  from: ChannelImage,
  previous: ChannelImage,
  actor: string,
) {
  const db = getDb(env.DB);
  const current = await getChannel(db, fleet, agent);
  if (!current || current.image !== from.image || current.version !== from.version) return { restored: false };
  // The history keeps names and versions: a catalog image goes back with its catalog fields.
  const row = from.catalog ? await imageByNameVersion(db, previous.image, previous.version) : undefined;
  await putChannel(db, actor, fleet, agent, {
    ...previous,
    catalog: row && row.state === "ready" ? catalogFieldsOf(row) : null,
  });
  return { restored: true };
}

/**
 * Rollback: the fleet's live servers whose desired config gives the agent the rollout's image, as
 * the index has them (through its desired-image index), once the channel went back. Among them
 * the servers that took the image from the channel while the rollout held it; the rest (targets
 * of the forward pass, servers an operator set) are told apart by the rollout and by each ledger.
 */
export async function serversAtImage(env: Env, fleet: string, agent: string, at: ChannelImage) {
  const rows = await getDb(env.DB)
    .select({ server_id: servers.id, hostname: servers.hostname, reboot_group: servers.rebootGroup })
    .from(agentInstances)
    .innerJoin(servers, eq(servers.id, agentInstances.serverId))
    .where(
      and(
        eq(agentInstances.desiredImage, at.image),
        eq(agentInstances.fleetId, fleet),
        eq(agentInstances.agent, agent),
        eq(agentInstances.desiredVersion, at.version),
        notInArray(servers.state, ["decommissioning", "removed"]),
      ),
    )
    .orderBy(asc(servers.hostname), asc(servers.id));
  return rows;
}
