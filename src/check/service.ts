/**
 * `check server-agents --fix` (docs/operator-guide.md): one action per server of a page of findings — re-plan and
 * re-issue its config, ask its host for a refresh, or nothing for a host that does not answer.
 * A dry run says what it would do and changes nothing; a real run does it and is audited.
 *
 * The answer is per server, whatever happens elsewhere: a fleet whose coordinator or a server whose
 * ledger does not answer gets its servers refused with a code (src/domain/errors.ts), and the others
 * are fixed. Re-issues are done fleet by fleet; what one fleet's coordinator allowed is told back to
 * it when the fleet is done (./fix-budget.ts in src/fleetlock/), including the writes this call
 * could not make, so their budget units free at once instead of at the holds' end.
 */
import { auditInsert } from "../db/audit";
import { checkServerAgents, type DriftFilter } from "./drift";
import { getDb, type Db } from "../db/client";
import type { DriftFix, DriftReason } from "../domain/enums";
import { DomainError, type ErrorCode } from "../domain/errors";
import type { Env } from "../env";
import { actorOf, visibleFleets, type Principal } from "../domain/principal";
import { planInputsOf } from "../planner/store";
import { coordinatorOf, ledgerOf } from "../objects/stubs";
import { fleetSettings, getFleet } from "../fleets/store";
import type { FixAllowance, FixOutcome } from "../fleetlock/fix-budget";
import { errorFields, logLine } from "../lib/log";
import type { BlockedBy } from "../model/blocked-by";
import type { Failure } from "../objects/kit/result";
import { resolveServer } from "../servers/service";

type FixRefusal = { ok: false; error: ErrorCode; message: string; blocked_by?: BlockedBy[] };

export interface FixAction {
  server: string;
  hostname: string;
  fleet: string;
  action: DriftFix;
  reasons: DriftReason[];
  result: { ok: true; outcome: string; generation: number } | FixRefusal | null;
}

const refused = (error: ErrorCode, message: string, blocked_by?: BlockedBy[]): FixRefusal =>
  blocked_by ? { ok: false, error, message, blocked_by } : { ok: false, error, message };

/** An object's refusal, as its result carries it (the RPC's types lose the union's narrowing). */
const refusalOf = (r: { ok: boolean }): FixRefusal => {
  const f = r as unknown as Failure;
  return refused(f.code, f.message);
};

/** An object that threw: what it did is not known. The cause goes to the log, not to the caller. */
function unavailable(what: string, err: unknown, fields: Record<string, unknown>): FixRefusal {
  logLine("warn", "drift fix: an object did not answer", { what, ...fields, ...errorFields(err) });
  return refused("unavailable", what);
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

/**
 * The re-issues of one fleet. A re-issue disrupts its server like an applying rollout target, so
 * it takes from the fleet's disruption budget: the fleet's coordinator says which servers may be
 * fixed now (each allowed one gets a deadline: its write must reach the ledger by then), and the
 * others are refused with the servers that hold the budget. Whatever happens, every server the
 * coordinator may have allowed is told back to it: the generation its ledger answered, or null when
 * nothing was written; a write whose answer was lost is not told (the hold's end settles it).
 */
async function reissueInFleet(
  env: Env,
  db: Db,
  fleet: string,
  actions: readonly FixAction[],
  actor: string,
  call: string,
) {
  // The generation each ledger has now: what the fix sees, and what a write goes past.
  const seen = new Map<FixAction, number>();
  for (const a of actions) {
    try {
      const view = await ledgerOf(env, a.server).view();
      if (view) seen.set(a, view.desired.generation);
      else a.result = refused("not_found", "the server no longer exists");
    } catch (err) {
      a.result = unavailable("the server's ledger did not answer; nothing was written", err, { server: a.server });
    }
  }
  if (seen.size === 0) return;
  const targets = [...seen].map(([a, generation]) => ({ server_id: a.server, generation }));
  // Servers whose holds this call may have taken, with what became of their writes (undefined: not known).
  const told = new Map<string, number | null | undefined>();
  let coordinator: ReturnType<typeof coordinatorOf> | null = null;
  try {
    const row = await getFleet(db, fleet);
    if (!row) {
      for (const a of seen.keys()) a.result = refused("unknown_fleet", `fleet '${fleet}' no longer exists`);
      return;
    }
    if (row.disruptionBudget) coordinator = coordinatorOf(env, fleet);
    let allowed: Record<string, FixAllowance> = {};
    if (coordinator) {
      for (const t of targets) told.set(t.server_id, null);
      try {
        allowed = await coordinator.allowFixes(fleetSettings(row), targets, actor, call);
      } catch (err) {
        for (const a of seen.keys())
          a.result = unavailable("the fleet's reboot coordinator did not answer; nothing was written", err, { fleet });
        return;
      }
    }
    const inputs = await planInputsOf(db, fleet);
    for (const [a] of seen) {
      const allowance = allowed[a.server] ?? { ok: true };
      if (!allowance.ok) {
        told.delete(a.server);
        a.result = refused("budget_exhausted", allowance.value, allowance.blocked_by);
        continue;
      }
      if (!inputs) {
        a.result = refused("unknown_fleet", `fleet '${fleet}' no longer exists`);
        continue;
      }
      try {
        const out = await ledgerOf(env, a.server).applyPlan(inputs, {
          actor,
          reason: `drift fix: ${a.reasons.join(", ")}`,
          reissue: true,
          deadline: allowance.deadline,
        });
        if (out.ok) {
          a.result = { ok: true, outcome: out.outcome, generation: out.view.desired.generation };
          // Only a write of this call's own counts: a skipped one (older inputs, not running) wrote
          // nothing, whatever generation another writer left, whose realized report may be past.
          const wrote = out.outcome === "issued" || out.outcome === "reissued";
          if (told.has(a.server)) told.set(a.server, wrote ? out.view.desired.generation : null);
        } else a.result = refusalOf(out);
      } catch (err) {
        // The ledger may have committed before its answer was lost: not told, so the hold stays until its end.
        if (told.has(a.server)) told.set(a.server, undefined);
        a.result = unavailable(
          "the server's ledger did not answer; the write may have happened: check again before fixing again",
          err,
          { server: a.server },
        );
      }
    }
  } catch (err) {
    for (const a of seen.keys())
      a.result ??= unavailable("the fix could not go on in this fleet; nothing was written", err, { fleet });
  } finally {
    const outcomes: FixOutcome[] = [...told]
      .filter((e): e is [string, number | null] => e[1] !== undefined)
      .map(([server_id, generation]) => ({ server_id, generation }));
    // Best effort: a hold not told of is settled at its end, by asking the ledger.
    if (coordinator && outcomes.length)
      await coordinator
        .fixOutcomes(call, outcomes)
        .catch((err) =>
          logLine("warn", "drift fix: outcomes not told to the coordinator", { fleet, ...errorFields(err) }),
        );
  }
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
  const fleetOf = new Map(check.pageRows.map((r) => [r.id, r.fleetId]));
  const byServer = new Map<string, FixAction>();
  for (const f of check.findings) {
    const a = byServer.get(f.server) ?? {
      server: f.server,
      hostname: f.hostname,
      fleet: fleetOf.get(f.server)!,
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
    // Names this call's holds at the coordinators, so what it tells them is of its own writes only,
    // and ties its two audit rows together.
    const call = crypto.randomUUID();
    const target = opts.filter.server
      ? `server:${opts.filter.server}`
      : opts.filter.fleet
        ? `fleet:${opts.filter.fleet}`
        : "check";
    // The intent first, before anything is written: should D1 refuse it, nothing was fixed and the
    // caller is told so (503); once it is in, no failure to record what followed can turn the
    // writes into an error (each write is audited by its own ledger, durably, besides).
    try {
      await db.batch([
        auditInsert(db, {
          actor,
          action: "check.fix",
          target,
          details: {
            filter: opts.filter,
            call,
            actions: actions.map((a) => ({ server: a.server, action: a.action, reasons: a.reasons })),
          },
        }),
      ]);
    } catch (err) {
      logLine("warn", "drift fix: the audit log refused its record; nothing was fixed", errorFields(err));
      throw new DomainError("unavailable", "the audit log did not take the fix's record; nothing was fixed: fix again");
    }
    const reissues = new Map<string, FixAction[]>();
    for (const a of actions) if (a.action === "reissue") reissues.set(a.fleet, [...(reissues.get(a.fleet) ?? []), a]);
    for (const [fleet, list] of reissues) await reissueInFleet(env, db, fleet, list, actor, call);
    for (const a of actions) {
      if (a.action !== "refresh") continue;
      try {
        const out = await ledgerOf(env, a.server).requestRefresh(actor);
        a.result = out.ok
          ? { ok: true, outcome: "refresh_requested", generation: out.view.desired.generation }
          : refusalOf(out);
      } catch (err) {
        a.result = unavailable("the server's ledger did not answer; the refresh may have been recorded", err, {
          server: a.server,
        });
      }
    }
    // What became of each server, under the same call. Best effort: the writes are done, and a
    // failure here must not answer as if they were not.
    await db
      .batch([
        auditInsert(db, {
          actor,
          action: "check.fix.result",
          target,
          details: {
            call,
            actions: actions.map((a) => ({
              server: a.server,
              action: a.action,
              ok: a.result?.ok ?? null,
              ...(a.result && !a.result.ok ? { error: a.result.error } : {}),
            })),
          },
        }),
      ])
      .catch((err) =>
        logLine("warn", "drift fix: its result's audit row was not written; each write is audited by its ledger", {
          call,
          ...errorFields(err),
        }),
      );
  }
  return { actions, skipped: check.skipped, rows: check.rows };
}
