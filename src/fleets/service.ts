/**
 * Fleet workflows. A fleet's row lives in D1, the owner of fleet configuration; each change commits
 * with its audit row (and, through the fleet's intent, its plan marks and coordinator tasks) in one
 * batch, then the coordinator is told (./tasks.ts) and the touched servers are re-planned.
 */
import { pagesChanged } from "../notices/notices";
import { auditInsert } from "../db/audit";
import { getDb, type Db } from "../db/client";
import { isUniqueViolation } from "../db/errors";
import { fleets } from "../db/schema";
import { DomainError, notFound } from "../domain/errors";
import type { Env } from "../env";
import { changeIntent, patchFleet } from "../intent/service";
import { planAfterChange } from "../planner/service";
import type { FleetInput, FleetPatch } from "./schemas";
import {
  fleetTask,
  fleetWipe,
  getFleet,
  listFleets,
  liveServersOf,
  noLiveServers,
  removalPending,
  type FleetRow,
} from "./store";
import { runFleetTasks } from "./tasks";
import { coordinatorOf } from "../objects/stubs";
import { unwrap } from "../objects/kit/result";

/** Servers a refused deletion names (the rest are counted). */
const NAMED_MAX = 20;

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
