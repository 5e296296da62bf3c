/**
 * The planner's inputs as D1 holds them: a fleet's intent (capabilities, role profiles, agent
 * channels) and the revision it is at. src/intent/ writes them; this reads them.
 */
import { eq } from "drizzle-orm";
import type { Db } from "../db/client";
import { agentChannels, fleetIntent, fleets, roleProfiles } from "../db/schema";
import type { ChannelImage, FleetPlanInputs, RoleAgent } from "./plan";

/** The fleet's intent revision now (0 before its first change). */
export async function intentRevOf(db: Db, fleet: string) {
  const row = await db.query.fleetIntent.findFirst({ where: eq(fleetIntent.fleetId, fleet) });
  return row?.rev ?? 0;
}

/**
 * Everything the planner needs for one fleet, read in one batch (one consistent snapshot) with the
 * intent revision it corresponds to.
 */
export async function planInputsOf(db: Db, fleet: string): Promise<FleetPlanInputs | null> {
  const [fleetRows, revRows, roleRows, channelRows] = await db.batch([
    db
      .select({ capabilities: fleets.capabilities, staleAfterS: fleets.staleAfterS })
      .from(fleets)
      .where(eq(fleets.id, fleet)),
    db.select({ rev: fleetIntent.rev }).from(fleetIntent).where(eq(fleetIntent.fleetId, fleet)),
    db
      .select({ role: roleProfiles.role, agents: roleProfiles.agents })
      .from(roleProfiles)
      .where(eq(roleProfiles.fleetId, fleet)),
    db
      .select({
        agent: agentChannels.agent,
        image: agentChannels.image,
        version: agentChannels.version,
        catalog: agentChannels.catalog,
      })
      .from(agentChannels)
      .where(eq(agentChannels.fleetId, fleet)),
  ]);
  if (fleetRows.length === 0) return null;
  const profiles: Record<string, RoleAgent[]> = {};
  for (const r of roleRows) profiles[r.role] = r.agents;
  const channels: Record<string, ChannelImage> = {};
  for (const c of channelRows) channels[c.agent] = { image: c.image, version: c.version, catalog: c.catalog };
  return {
    fleet,
    rev: revRows[0]?.rev ?? 0,
    capabilities: fleetRows[0].capabilities,
    stale_after_s: fleetRows[0].staleAfterS,
    profiles,
    channels,
  };
}
