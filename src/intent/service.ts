/**
 * Fleet intent workflows (docs/operator-guide.md): agent channels and role profiles. Their facts
 * live in D1 (the owner of fleet configuration); each change commits in one batch with its audit
 * row and the bump of the fleet's intent revision (`changeIntent`, src/fleets/service.ts), or not
 * at all.
 */
import { pagesChanged } from "../notices/notices";
import { auditInsert } from "../db/audit";
import { getDb, type Db } from "../db/client";
import { DomainError, notFound } from "../domain/errors";
import type { RoleInput } from "./schemas";
import { channelWrite, roleDelete, roleWrite, storedAgents } from "./batch";
import { imageForFleet, type ChannelImage, type ImageName } from "../images/resolve";
import {
  agentsWithoutChannel,
  channelHistory,
  getChannel,
  getRole,
  listChannels,
  listRoles,
  channelView,
  roleView,
  type ChannelRow,
  type RoleRow,
} from "./store";
import type { Env } from "../env";
import { decodeCursor, page } from "../http/paging";
import { changeIntent } from "../fleets/service";
import { getFleet } from "../fleets/store";
import { markServersWithRole, planAfterChange } from "../planner/service";

type Ctx = { waitUntil(p: Promise<unknown>): void };

/**
 * Sets the image the fleet wants for an agent. It moves no server that already runs the agent
 * (rollouts do that); new servers and newly added roles get it. Setting what is already there
 * changes nothing and records nothing.
 */
export function putChannel(db: Db, actor: string, fleet: string, agent: string, input: ChannelImage) {
  return changeIntent(db, fleet, async () => {
    const current = await getChannel(db, fleet, agent);
    const catalog = input.catalog ?? null;
    if (
      current &&
      current.image === input.image &&
      current.version === input.version &&
      current.catalog?.image_id === catalog?.image_id
    ) {
      return { statements: [], result: { channel: current, changed: false } };
    }
    const now = Date.now();
    const channel: ChannelRow = {
      fleetId: fleet,
      agent,
      image: input.image,
      version: input.version,
      catalog,
      // A new image keeps the channel's default rollout (a fleet spec's to change).
      rollout: current?.rollout ?? null,
      updatedAt: now,
      updatedBy: actor,
    };
    const previous = current ? { image: current.image, version: current.version } : null;
    return {
      result: { channel, changed: true },
      statements: [
        ...channelWrite(db, actor, fleet, agent, input, previous, now),
        auditInsert(db, {
          actor,
          action: "channel.put",
          target: `fleet:${fleet}`,
          details: {
            agent,
            image: input.image,
            version: input.version,
            ...(catalog ? { image_id: catalog.image_id } : {}),
            previous,
          },
        }),
      ],
    };
  });
}

/**
 * The agents a role runs in the fleet; each must have a channel, so a new server can get it. A
 * change re-plans the servers with the role (`planning`; null when nothing changed).
 */
export async function putRole(env: Env, ctx: Ctx, actor: string, fleet: string, role: string, input: RoleInput) {
  const out = await changeRole(getDb(env.DB), actor, fleet, role, input);
  if (out.changed) pagesChanged(env, ctx, fleet, "fleet");
  const planning = out.changed ? await planAfterChange(env, ctx, fleet) : null;
  return { ...out, planning };
}

function changeRole(db: Db, actor: string, fleet: string, role: string, input: RoleInput) {
  const agents = storedAgents(input.agents);
  return changeIntent(db, fleet, async ({ rev }) => {
    const missing = await agentsWithoutChannel(
      db,
      fleet,
      agents.map((a) => a.name),
    );
    if (missing.length) {
      throw new DomainError("unknown_channel", `agents without a channel in fleet '${fleet}': ${missing.join(", ")}`, {
        agents: missing,
      });
    }
    const current = await getRole(db, fleet, role);
    if (current && JSON.stringify(current.agents) === JSON.stringify(agents)) {
      return { statements: [], result: { role: current, changed: false } };
    }
    const now = Date.now();
    const row: RoleRow = { fleetId: fleet, role, agents, updatedAt: now, updatedBy: actor };
    return {
      result: { role: row, changed: true },
      statements: [
        roleWrite(db, actor, fleet, role, agents, now),
        // The servers with this role are re-planned (a new role's agents get their channel's image).
        ...markServersWithRole(db, fleet, role, rev + 1, now, {
          actor,
          action: current ? "role.update" : "role.create",
        }),
        auditInsert(db, {
          actor,
          action: current ? "role.update" : "role.create",
          target: `fleet:${fleet}`,
          details: { role, agents, previous: current?.agents ?? null },
        }),
      ],
    };
  });
}

/** Deletes a role profile; the servers that had it are re-planned. */
export async function deleteRole(env: Env, ctx: Ctx, actor: string, fleet: string, role: string) {
  const db = getDb(env.DB);
  await changeIntent(db, fleet, async ({ rev }) => {
    const current = await getRole(db, fleet, role);
    if (!current) throw notFound("role", `${fleet}/${role}`);
    return {
      result: undefined,
      statements: [
        ...markServersWithRole(db, fleet, role, rev + 1, Date.now(), { actor, action: "role.delete" }),
        roleDelete(db, fleet, role),
        auditInsert(db, {
          actor,
          action: "role.delete",
          target: `fleet:${fleet}`,
          details: { role, agents: current.agents },
        }),
      ],
    };
  });
  pagesChanged(env, ctx, fleet, "fleet");
  await planAfterChange(env, ctx, fleet);
}

// ---- for the routes: channels and roles of a fleet ----

/** PUT /v1/fleets/{fleet}/channels/{agent}: the image by id, or by name and version (a catalog image, under the fleet's policy). */
export async function setChannel(env: Env, ctx: Ctx, actor: string, fleet: string, agent: string, input: ImageName) {
  const db = getDb(env.DB);
  const out = await putChannel(db, actor, fleet, agent, await imageForFleet(db, fleet, input));
  if (out.changed) pagesChanged(env, ctx, fleet, "fleet");
  return out;
}

/**
 * A page of a fleet's channels or roles, by cursor; the fleet must exist (an empty page would
 * hide a typo in its name).
 */
async function pageOfFleet<R, V>(
  env: Env,
  fleet: string,
  q: { limit: number; cursor?: string },
  list: (db: Db, after: string | null) => Promise<R[]>,
  keyOf: (row: R) => string,
  view: (row: R) => V,
) {
  const after = decodeCursor(q.cursor, 1);
  const db = getDb(env.DB);
  if (!(await getFleet(db, fleet))) throw notFound("fleet", fleet);
  const { items, next_cursor } = page(await list(db, after?.[0] ?? null), q.limit, (r) => [keyOf(r)]);
  return { items: items.map(view), next_cursor };
}

export const channelsOfFleet = (env: Env, fleet: string, q: { limit: number; cursor?: string }) =>
  pageOfFleet(
    env,
    fleet,
    q,
    (db, after) => listChannels(db, fleet, after, q.limit),
    (r) => r.agent,
    channelView,
  );

export const rolesOfFleet = (env: Env, fleet: string, q: { limit: number; cursor?: string }) =>
  pageOfFleet(
    env,
    fleet,
    q,
    (db, after) => listRoles(db, fleet, after, q.limit),
    (r) => r.role,
    roleView,
  );

/** One channel and a page of its history, newest first. */
export async function channelWithHistory(env: Env, fleet: string, agent: string, before: number | null, limit: number) {
  const db = getDb(env.DB);
  const channel = await getChannel(db, fleet, agent);
  if (!channel) throw notFound("channel", `${fleet}/${agent}`);
  return { channel, history: await channelHistory(db, fleet, agent, before, limit) };
}

export async function roleOf(env: Env, fleet: string, role: string) {
  const row = await getRole(getDb(env.DB), fleet, role);
  if (!row) throw notFound("role", `${fleet}/${role}`);
  return row;
}
