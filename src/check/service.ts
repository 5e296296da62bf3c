/**
 * `check server-agents --fix` (docs/operator-guide.md): one action per server of a page of findings — re-plan and
 * re-issue its config, ask its host for a refresh, or nothing for a host that does not answer.
 * A dry run says what it would do and changes nothing; a real run does it and is audited.
 */
import { auditInsert } from "../db/audit";
import { checkServerAgents, type DriftFilter } from "./drift";
import { getDb } from "../db/client";
import type { DriftFix, DriftReason } from "../domain/enums";
import type { Env } from "../env";
import { actorOf, visibleFleets, type Principal } from "../domain/principal";
import { planInputsOf } from "../planner/store";
import type { FleetPlanInputs } from "../planner/plan";
import { coordinatorOf, ledgerOf } from "../objects/stubs";
import { fleetSettings } from "../fleets/store";
import type { BlockedBy } from "../model/blocked-by";
import { resolveServer } from "../servers/service";

export interface FixAction {
  server: string;
  hostname: string;
  action: DriftFix;
  reasons: DriftReason[];
  result:
    | { ok: true; outcome: string; generation: number }
    | { ok: false; error: string; message?: string; blocked_by?: BlockedBy[] }
    | null;
}

/** The filter with its server (id, hostname or fleet/hostname) resolved to an id. */
async function resolved(env: Env, principal: Principal, filter: DriftFilter): Promise<DriftFilter> {
  const visible = { ...filter, visible: visibleFleets(principal) };
  return filter.server === undefined
    ? visible
    : { ...visible, server: await resolveServer(env, principal, filter.server, filter.fleet) };
}

/** `check server-agents`: a page of drift findings from the fleet-wide index. */
export const checkServers = async (
  env: Env,
  principal: Principal,
  filter: DriftFilter,
  after: string | null,
  limit: number,
) => checkServerAgents(getDb(env.DB), await resolved(env, principal, filter), after, limit);

/** The fleet (and desired generation) of each server whose fix re-issues its config (that restarts its running agents). */
async function reissuedFleets(env: Env, actions: readonly FixAction[]) {
  const out = new Map<string, { fleet: string; generation: number }>();
  for (const a of actions) {
    if (a.action !== "reissue") continue;
    const view = await ledgerOf(env, a.server).view();
    if (view) out.set(a.server, { fleet: view.record.fleet_id, generation: view.desired.generation });
  }
  return out;
}

/**
 * A re-issue disrupts its server like an applying rollout target, so it takes from the fleet's
 * disruption budget: each fleet's coordinator says which of its servers may be fixed now, and the
 * others are refused with the servers that hold the budget. A refresh changes nothing running.
 * An allowed fix whose unit is held gets a deadline: its write must reach the ledger by then.
 */
async function overBudget(
  env: Env,
  db: ReturnType<typeof getDb>,
  fleetOf: ReadonlyMap<string, { fleet: string; generation: number }>,
  actor: string,
) {
  const byFleet = new Map<string, { server_id: string; generation: number }[]>();
  for (const [server_id, { fleet, generation }] of fleetOf)
    byFleet.set(fleet, [...(byFleet.get(fleet) ?? []), { server_id, generation }]);
  const refused = new Map<string, { kind: string; value: string; blocked_by: BlockedBy[] }>();
  const deadlines = new Map<string, number>();
  for (const [fleet, servers] of byFleet) {
    const row = await db.query.fleets.findFirst({ where: (f, { eq }) => eq(f.id, fleet) });
    if (!row?.disruptionBudget) continue;
    const answer = await coordinatorOf(env, fleet).allowFixes(fleetSettings(row), servers, actor);
    for (const [server, v] of Object.entries(answer)) {
      if (!v.ok) refused.set(server, v);
      else if (v.deadline !== undefined) deadlines.set(server, v.deadline);
    }
  }
  return { refused, deadlines };
}

const RANK: Record<DriftFix, number> = { reissue: 2, refresh: 1, none: 0 };

export async function fixServerAgents(
  env: Env,
  principal: Principal,
  opts: { filter: DriftFilter; dryRun: boolean; after: string | null; limit: number },
) {
  const db = getDb(env.DB);
  const actor = actorOf(principal);
  opts = { ...opts, filter: await resolved(env, principal, opts.filter) };
  const check = await checkServerAgents(db, opts.filter, opts.after, opts.limit);
  const byServer = new Map<string, FixAction>();
  for (const f of check.findings) {
    const a = byServer.get(f.server) ?? {
      server: f.server,
      hostname: f.hostname,
      action: "none",
      reasons: [],
      result: null,
    };
    if (!a.reasons.includes(f.reason)) a.reasons.push(f.reason);
    // A new generation also makes the host report: re-issue covers a refresh.
    if (RANK[f.fix] > RANK[a.action]) a.action = f.fix;
    byServer.set(f.server, a);
  }
  const actions = [...byServer.values()];
  if (!opts.dryRun) {
    const inputs = new Map<string, FleetPlanInputs | null>();
    const fleetOf = await reissuedFleets(env, actions);
    const { refused, deadlines } = await overBudget(env, db, fleetOf, actor);
    for (const a of actions) {
      if (a.action === "none") continue;
      const no = refused.get(a.server);
      if (no) {
        a.result = { ok: false, error: no.kind, message: no.value, blocked_by: no.blocked_by };
        continue;
      }
      try {
        const ledger = ledgerOf(env, a.server);
        if (a.action === "reissue") {
          const fleet = fleetOf.get(a.server)?.fleet;
          if (fleet && !inputs.has(fleet)) inputs.set(fleet, await planInputsOf(db, fleet));
          const fleetInputs = fleet ? inputs.get(fleet) : null;
          if (!fleetInputs) throw new Error("the server's fleet no longer exists");
          const out = await ledger.applyPlan(fleetInputs, {
            actor,
            reason: `drift fix: ${a.reasons.join(", ")}`,
            reissue: true,
            deadline: deadlines.get(a.server),
          });
          a.result = out.ok
            ? { ok: true, outcome: out.outcome, generation: out.view.desired.generation }
            : { ok: false, error: (out as unknown as { code: string }).code };
        } else {
          const out = await ledger.requestRefresh(actor);
          a.result = out.ok
            ? { ok: true, outcome: "refresh_requested", generation: out.view.desired.generation }
            : { ok: false, error: (out as unknown as { code: string }).code };
        }
      } catch (err) {
        a.result = { ok: false, error: String(err) };
      }
      // A re-issue that wrote nothing disrupts nothing: its budget unit (if one was taken) frees now.
      const fleet = fleetOf.get(a.server)?.fleet;
      if (a.action === "reissue" && !a.result?.ok && fleet)
        await coordinatorOf(env, fleet)
          .releaseFix(a.server)
          .catch(() => undefined);
    }
    await db.batch([
      auditInsert(db, {
        actor,
        action: "check.fix",
        target: opts.filter.server
          ? `server:${opts.filter.server}`
          : opts.filter.fleet
            ? `fleet:${opts.filter.fleet}`
            : "check",
        details: {
          filter: opts.filter,
          actions: actions.map((a) => ({ server: a.server, action: a.action, ok: a.result?.ok ?? null })),
        },
      }),
    ]);
  }
  return { actions, skipped: check.skipped, rows: check.rows };
}
