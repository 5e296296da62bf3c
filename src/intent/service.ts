/**
 * Fleet intent workflows (docs/operator-guide.md): agent channels, role profiles and fleet settings. Their facts
 * live in D1 (the owner of fleet configuration); each change commits in one batch with its audit
 * row and the bump of the fleet's intent revision, or not at all.
 */
import { pagesChanged } from "../notices/notices";
import { eq, sql, type SQL } from "drizzle-orm";
import { auditInsert } from "../db/audit";
import { getDb, type Db } from "../db/client";
import { fleets } from "../db/schema";
import { DomainError, notFound } from "../domain/errors";
import type { RoleInput } from "./schemas";
import { channelWrite, roleDelete, roleWrite, storedAgents } from "./batch";
import { imageForFleet, type ChannelImage, type ImageName } from "../images/resolve";
import {
  agentsWithoutChannel,
  bumpIntentRev,
  channelHistory,
  getChannel,
  getRole,
  isIntentConflict,
  listChannels,
  listRoles,
  channelView,
  roleView,
  type ChannelRow,
  type RoleRow,
} from "./store";
import { intentRevOf } from "../planner/store";
import type { Env } from "../env";
import { decodeCursor, page } from "../http/paging";
import { fleetExists, fleetTask, getFleet, type FleetRow } from "../fleets/store";
import type { FleetPatch } from "../fleets/schemas";
import { MAX_CAPABILITIES } from "../domain/limits";
import { markFleet, markServersWithRole, planAfterChange } from "../planner/service";

type Ctx = { waitUntil(p: Promise<unknown>): void };

type Statement = Parameters<Db["batch"]>[0][number];

/** Each round of a race commits at least one writer, so this bounds a race of this many. */
const MAX_ATTEMPTS = 16;

/**
 * Read-check-write of one fleet's intent. `decide` reads what it needs and returns the statements
 * of its change (or none: nothing to change); they commit together with the revision bump only if
 * no other change of the fleet's intent committed in between, else `decide` runs again on the new
 * state. An optional `guard` (SQL) is checked at commit the same way.
 */
export async function changeIntent<T>(
  db: Db,
  fleet: string,
  decide: (ctx: { fleet: FleetRow; rev: number }) => Promise<{ statements: Statement[]; result: T; guard?: SQL }>,
): Promise<T> {
  for (let attempt = 1; ; attempt++) {
    const rev = await intentRevOf(db, fleet);
    const row = await getFleet(db, fleet);
    if (!row) throw notFound("fleet", fleet);
    const { statements, result, guard } = await decide({ fleet: row, rev });
    if (statements.length === 0) return result;
    try {
      // A deleted fleet's intent row is gone, which reads as revision 0: the fleet's own row decides.
      const stillThere = guard ? sql`${fleetExists(fleet)} AND (${guard})` : fleetExists(fleet);
      await db.batch([bumpIntentRev(db, fleet, rev, stillThere), ...statements]);
      return result;
    } catch (err) {
      if (!isIntentConflict(err)) throw err;
      if (attempt >= MAX_ATTEMPTS) {
        throw new DomainError("concurrent_change", `fleet '${fleet}' is being changed concurrently; retry`);
      }
      await new Promise((r) => setTimeout(r, Math.random() * 10 * attempt));
    }
  }
}

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

/**
 * PATCH /v1/fleets/{fleet}: capabilities merged (null removes a key), settings replaced. An
 * unchanged result writes nothing.
 */
export function patchFleet(db: Db, actor: string, fleet: string, patch: FleetPatch) {
  return changeIntent(db, fleet, async ({ fleet: row, rev }) => {
    const capabilities = { ...row.capabilities };
    for (const [k, v] of Object.entries(patch.capabilities ?? {})) {
      if (v === null) delete capabilities[k];
      else capabilities[k] = v;
    }
    if (Object.keys(capabilities).length > MAX_CAPABILITIES) {
      throw new DomainError("too_many_capabilities", `a fleet has at most ${MAX_CAPABILITIES} capabilities`);
    }
    const next: FleetRow = {
      ...row,
      capabilities,
      staleAfterS: patch.stale_after_s ?? row.staleAfterS,
      lockTtlS: patch.lock_ttl_s ?? row.lockTtlS,
      allowUnknownIds: patch.allow_unknown_ids ?? row.allowUnknownIds,
      defaultGroupSlots: patch.default_group_slots === undefined ? row.defaultGroupSlots : patch.default_group_slots,
      disruptionBudget:
        patch.disruption_budget === undefined ? (row.disruptionBudget ?? null) : patch.disruption_budget,
      imagePolicy: patch.image_policy ?? row.imagePolicy,
    };
    const changed = {
      capabilities: JSON.stringify(sortKeys(capabilities)) !== JSON.stringify(sortKeys(row.capabilities)),
      settings:
        next.staleAfterS !== row.staleAfterS ||
        next.lockTtlS !== row.lockTtlS ||
        next.allowUnknownIds !== row.allowUnknownIds ||
        next.defaultGroupSlots !== row.defaultGroupSlots ||
        JSON.stringify(next.disruptionBudget ?? null) !== JSON.stringify(row.disruptionBudget ?? null),
    };
    // The image policy is read from D1 by the writes it checks: no object keeps a copy.
    const policyChanged = next.imagePolicy !== row.imagePolicy;
    if (!changed.capabilities && !changed.settings && !policyChanged)
      return { statements: [], result: { fleet: row, before: row, changed } };
    return {
      result: { fleet: next, before: row, changed },
      statements: [
        db
          .update(fleets)
          .set({
            capabilities,
            staleAfterS: next.staleAfterS,
            lockTtlS: next.lockTtlS,
            allowUnknownIds: next.allowUnknownIds,
            defaultGroupSlots: next.defaultGroupSlots,
            disruptionBudget: next.disruptionBudget,
            imagePolicy: next.imagePolicy,
          })
          .where(eq(fleets.id, fleet)),
        auditInsert(db, { actor, action: "fleet.patch", target: `fleet:${fleet}`, details: patch }),
        // The coordinator copies the lock settings; told at once after the commit, retried by the cron.
        ...(changed.settings ? [fleetTask(db, fleet, "push_settings", rev + 1)] : []),
        // Capabilities change plans; stale_after is copied by every ledger (its staleness deadline).
        ...(changed.capabilities || next.staleAfterS !== row.staleAfterS
          ? markFleet(db, fleet, rev + 1, Date.now(), { actor, action: "fleet.patch" })
          : []),
      ],
    };
  });
}

function sortKeys(o: Record<string, boolean>) {
  return Object.fromEntries(Object.entries(o).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)));
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
