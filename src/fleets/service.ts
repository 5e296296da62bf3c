/**
 * Fleet workflows. A fleet's row lives in D1, the owner of fleet configuration; each change commits
 * with its audit row (and, through the fleet's intent revision, its plan marks and coordinator
 * tasks) in one batch, then the coordinator is told (./tasks.ts) and the touched servers are
 * re-planned. `changeIntent` is the one read-check-write every change of a fleet's configuration
 * goes through: its row here, its channels and roles (src/intent/), its spec (src/specs/).
 */
import { pagesChanged } from "../notices/notices";
import { eq, sql, type SQL } from "drizzle-orm";
import { auditInsert } from "../db/audit";
import { getDb, type Db } from "../db/client";
import { isUniqueViolation } from "../db/errors";
import { fleets } from "../db/schema";
import { DomainError, notFound } from "../domain/errors";
import type { Env } from "../env";
import { MAX_CAPABILITIES } from "../domain/limits";
import { markFleet, planAfterChange } from "../planner/service";
import { intentRevOf } from "../planner/store";
import type { FleetInput, FleetPatch } from "./schemas";
import {
  bumpIntentRev,
  fleetExists,
  fleetTask,
  fleetWipe,
  getFleet,
  isIntentConflict,
  listFleets,
  liveServerIdsOfFleet,
  liveServersOf,
  noLiveServers,
  removalPending,
  type FleetRow,
} from "./store";
import { runFleetTasks } from "./tasks";
import { coordinatorOf, ledgerOf } from "../objects/stubs";
import { unwrap } from "../objects/kit/result";

/** Servers a refused deletion names (the rest are counted). */
const NAMED_MAX = 20;

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

export async function createFleet(env: Env, actor: string, input: FleetInput): Promise<FleetRow> {
  const db = getDb(env.DB);
  if (await removalPending(db, input.id)) {
    throw new DomainError(
      "fleet_removal_pending",
      `fleet '${input.id}' was deleted and is still being cleaned up; retry shortly`,
    );
  }
  const row = {
    id: input.id,
    capabilities: input.capabilities,
    staleAfterS: input.stale_after_s,
    lockTtlS: input.lock_ttl_s,
    allowUnknownIds: input.allow_unknown_ids,
    defaultGroupSlots: input.default_group_slots,
    disruptionBudget: input.disruption_budget,
    imagePolicy: input.image_policy,
    // No webhook yet (a deleted fleet's coordinator is wiped before its id is free again): its
    // ledgers keep drift-only news home until one asks (src/fleetlock/health-watch.ts).
    healthWatch: 0,
    createdAt: Date.now(),
  };
  try {
    // One batch: the fleet and its audit row commit together or not at all.
    await db.batch([
      db.insert(fleets).values(row),
      auditInsert(db, { actor, action: "fleet.create", target: `fleet:${input.id}`, details: input }),
    ]);
  } catch (err) {
    if (isUniqueViolation(err)) throw new DomainError("already_exists", `fleet '${input.id}' already exists`);
    throw err;
  }
  return { ...row, fleetlockKeyHash: null };
}

export async function fleetById(env: Env, id: string) {
  const row = await getFleet(getDb(env.DB), id);
  if (!row) throw notFound("fleet", id);
  return row;
}

/** A page of fleets by id (one more row than `limit` when another page exists). */
export const searchFleets = (env: Env, visible: readonly string[] | null, after: string | null, limit: number) =>
  listFleets(getDb(env.DB), visible, after, limit);

/**
 * PATCH /v1/fleets/{id}: the change commits first; then the coordinator gets new lock settings and
 * the servers are re-planned when capabilities or the staleness setting they copy changed.
 */
export async function updateFleet(
  env: Env,
  ctx: { waitUntil(p: Promise<unknown>): void },
  actor: string,
  id: string,
  patch: FleetPatch,
) {
  const out = await patchFleet(getDb(env.DB), actor, id, patch);
  if (out.changed.settings || out.changed.capabilities || out.fleet.staleAfterS !== out.before.staleAfterS)
    pagesChanged(env, ctx, id, "fleet");
  if (out.changed.settings) await runFleetTasks(env, { fleet: id });
  if (out.changed.capabilities || out.fleet.staleAfterS !== out.before.staleAfterS) await planAfterChange(env, ctx, id);
  return out.fleet;
}

/**
 * PATCH /v1/fleets/{fleet}: capabilities merged (null removes a key), settings replaced. An
 * unchanged result writes nothing.
 */
function patchFleet(db: Db, actor: string, fleet: string, patch: FleetPatch) {
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

const REFRESH_PARALLEL = 16;

/**
 * Refresh for a fleet: every server of one page of the fleet's index (not removed or being
 * removed) is asked to report again. Paged, so a large fleet is asked in bounded steps.
 */
export async function refreshFleet(env: Env, actor: string, fleet: string, after: string | null, limit: number) {
  const db = getDb(env.DB);
  if (!(await getFleet(db, fleet))) throw notFound("fleet", fleet);
  const rows = await liveServerIdsOfFleet(db, fleet, after, limit);
  const ids = rows.slice(0, limit).map((r) => r.id);
  const failed: string[] = [];
  let next = 0;
  await Promise.all(
    Array.from({ length: Math.min(REFRESH_PARALLEL, ids.length) }, async () => {
      while (next < ids.length) {
        const id = ids[next++];
        try {
          const out = await ledgerOf(env, id).requestRefresh(actor);
          if (!out.ok) failed.push(id);
        } catch {
          failed.push(id);
        }
      }
    }),
  );
  return { rows, requested: ids.length - failed.length, failed };
}

/** Deletes a fleet whose servers are all removed: its rows go at once, its coordinator is wiped after. */
export async function deleteFleet(env: Env, actor: string, fleet: string) {
  const db = getDb(env.DB);
  const coordinator = coordinatorOf(env, fleet);
  let sealed = false;
  try {
    await changeIntent(db, fleet, async ({ rev }) => {
      const { byState, named } = await liveServersOf(db, fleet, NAMED_MAX);
      if (byState.length) {
        const total = byState.reduce((n, r) => n + r.n, 0);
        throw new DomainError("fleet_not_empty", `fleet '${fleet}' still has ${total} server(s) not removed`, {
          by_state: Object.fromEntries(byState.map((r) => [r.state, r.n])),
          servers: named,
          more: Math.max(0, total - named.length),
        });
      }
      // A server being registered is in no index yet: the coordinator, which reserves its name,
      // refuses while one is, and keeps new ones out until the wipe.
      unwrap(await coordinator.sealForDeletion());
      sealed = true;
      return deletion(db, actor, fleet, rev);
    });
  } catch (err) {
    if (sealed) await coordinator.unseal().catch(() => {});
    throw err;
  }
  await runFleetTasks(env, { fleet });
}

function deletion(db: Db, actor: string, fleet: string, rev: number) {
  return {
    result: undefined,
    guard: noLiveServers(fleet),
    statements: [
      ...fleetWipe(db, fleet),
      fleetTask(db, fleet, "wipe", rev + 1),
      auditInsert(db, { actor, action: "fleet.delete", target: `fleet:${fleet}` }),
    ],
  };
}
