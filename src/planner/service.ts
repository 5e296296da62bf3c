/**
 * The planner's workflows (docs/operator-guide.md). A change of plan inputs (role profile, capabilities, the
 * fleet's stale_after) marks, in its own D1 batch, the servers it touches (plan_marks); the
 * planner then offers each marked server's ledger the fleet's inputs, and the ledger issues a new
 * generation only if its plan differs (and it is not pinned). A mark is deleted only once its
 * ledger took inputs at least as new as the mark, so nothing is lost to a crash: the cron picks up
 * whatever marks remain, oldest first, reading only the marks table.
 */
import { and, asc, eq, lte, sql, type SQL } from "drizzle-orm";
import type { Db } from "../db/client";
import { getDb } from "../db/client";
import { auditLog, planMarks, servers } from "../db/schema";
import type { Env } from "../env";
import { intentRevOf, planInputsOf } from "./store";
import { notFound } from "../domain/errors";
import { unwrap } from "../objects/kit/result";
import { ledgerOf } from "../objects/stubs";
import { plan, type FleetPlanInputs } from "./plan";

/** Servers re-planned in parallel by one planner run. */
const CONCURRENCY = 16;
const BATCH = 200;
const MAX_BACKOFF_MS = 5 * 60_000;

/** The first desired config of a new server, and the intent revision it was planned from. */
export async function firstPlan(env: Env, fleet: string, roles: string[]) {
  const inputs = await planInputsOf(getDb(env.DB), fleet);
  if (!inputs) return { agents: [], rev: 0 };
  const p = plan({
    roles,
    profiles: inputs.profiles,
    capabilities: inputs.capabilities,
    channels: inputs.channels,
    current: [],
  });
  return {
    agents: p.agents.map(({ name, image, version, catalog }) => ({
      name,
      image,
      version,
      ...(catalog ? { ...catalog } : {}),
    })),
    rev: inputs.rev,
  };
}

/**
 * After registration: re-plans the new server if the fleet's intent moved past what it was planned
 * from. Its answer is the ledger's view as the stub types it, so the planner names no ledger type.
 */
export async function catchUpPlan(env: Env, id: string, fleet: string, rev: number) {
  const db = getDb(env.DB);
  if ((await intentRevOf(db, fleet)) === rev) return null;
  const inputs = await planInputsOf(db, fleet);
  if (!inputs) return null;
  const out = unwrap(
    await ledgerOf(env, id).applyPlan(inputs, { actor: "planner", reason: "registration raced an intent change" }),
  );
  return out.view;
}

/** Re-plans one server now (drift fix, release of a pin). */
export async function replanServer(env: Env, actor: string, id: string, opts: { reason: string; release?: boolean }) {
  const ledger = ledgerOf(env, id);
  const current = await ledger.view();
  if (!current) throw notFound("server", id);
  const inputs = await planInputsOf(getDb(env.DB), current.record.fleet_id);
  if (!inputs) throw notFound("fleet", current.record.fleet_id);
  return unwrap(await ledger.applyPlan(inputs, { actor, reason: opts.reason, release: opts.release }));
}

// ---- marks ----

const notGone = sql`${servers.state} NOT IN ('removed', 'decommissioning')`;

/** The intent change that re-plans servers: who made it, and its own audit action. */
export interface ReplanCause {
  actor: string;
  action: string;
}

/**
 * A change's re-planning, for its own batch: the marks of the servers it touches, and one audit
 * row per such server (`server.replan`: the revision and the change that caused it), each one
 * statement for the whole fleet. The ledgers then issue the planner-driven generations without
 * an audit row of their own (src/ledger/planning.ts `audited`), so a server re-planned by an
 * intent change costs D1 only its projection (docs/storage.md "Audit").
 */
function markWhere(db: Db, where: SQL, fleet: string, rev: number, now: number, cause: ReplanCause) {
  const marked = and(eq(servers.fleetId, fleet), notGone, where);
  const mark = db
    .insert(planMarks)
    .select(
      db
        .select({
          serverId: servers.id,
          fleetId: servers.fleetId,
          rev: sql<number>`${rev}`.as("rev"),
          markedAt: sql<number>`${now}`.as("marked_at"),
          attempts: sql<number>`0`.as("attempts"),
        })
        .from(servers)
        .where(marked),
    )
    .onConflictDoUpdate({
      target: planMarks.serverId,
      set: { rev: sql`excluded.rev`, markedAt: sql`excluded.marked_at`, attempts: 0 },
    });
  const audit = db.insert(auditLog).select(
    db
      .select({
        id: sql<number>`NULL`.as("id"),
        at: sql<number>`${now}`.as("at"),
        actor: sql<string>`${cause.actor}`.as("actor"),
        action: sql<string>`'server.replan'`.as("action"),
        target: sql<string>`'server:' || ${servers.id}`.as("target"),
        details: sql<string>`json_object('rev', ${rev}, 'cause', ${cause.action}, 'fleet', ${fleet})`.as("details"),
        eventId: sql<string>`NULL`.as("event_id"),
      })
      .from(servers)
      .where(marked),
  );
  return [mark, audit] as const;
}

/** Marks (and audits, see markWhere) the fleet's servers that have `role` (a role profile changed). */
export const markServersWithRole = (
  db: Db,
  fleet: string,
  role: string,
  rev: number,
  now: number,
  cause: ReplanCause,
) =>
  markWhere(db, sql`EXISTS (SELECT 1 FROM json_each(${servers.roles}) WHERE value = ${role})`, fleet, rev, now, cause);

/** Marks (and audits) every server of the fleet (capabilities or a setting the ledgers copy changed). */
export const markFleet = (db: Db, fleet: string, rev: number, now: number, cause: ReplanCause) =>
  markWhere(db, sql`1 = 1`, fleet, rev, now, cause);

// ---- the planner run ----

export interface PlannerRun {
  servers: number;
  issued: number;
  failed: number;
  remaining: boolean;
}

/**
 * Works through due marks (of one fleet, or all), oldest first, until none is due or the time
 * budget is spent. Each fleet's inputs are read once per batch (one D1 batch); each ledger
 * answers for itself; done marks are deleted one statement per fleet and batch.
 */
export async function runPlanner(env: Env, opts: { fleet?: string; budgetMs?: number } = {}): Promise<PlannerRun> {
  const db = getDb(env.DB);
  const started = Date.now();
  const run: PlannerRun = { servers: 0, issued: 0, failed: 0, remaining: false };
  for (;;) {
    const now = Date.now();
    const marks = await db
      .select()
      .from(planMarks)
      .where(and(opts.fleet ? eq(planMarks.fleetId, opts.fleet) : undefined, lte(planMarks.markedAt, now)))
      .orderBy(asc(planMarks.markedAt))
      .limit(BATCH);
    if (marks.length === 0) return run;
    const byFleet = new Map<string, typeof marks>();
    for (const m of marks) byFleet.set(m.fleetId, [...(byFleet.get(m.fleetId) ?? []), m]);
    for (const [fleet, fleetMarks] of byFleet) {
      const inputs = await planInputsOf(db, fleet);
      if (!inputs) {
        await db.delete(planMarks).where(eq(planMarks.fleetId, fleet));
        continue;
      }
      await planFleetMarks(env, db, inputs, fleetMarks, run);
    }
    if (opts.budgetMs !== undefined && Date.now() - started > opts.budgetMs) {
      run.remaining = true;
      return run;
    }
  }
}

async function planFleetMarks(
  env: Env,
  db: Db,
  inputs: FleetPlanInputs,
  marks: (typeof planMarks.$inferSelect)[],
  run: PlannerRun,
) {
  const done: string[] = [];
  const failed: typeof marks = [];
  let next = 0;
  const worker = async () => {
    while (next < marks.length) {
      const m = marks[next++];
      try {
        // Audited by the change that marked it (markWhere): the ledger writes no audit row of its own.
        const out = await ledgerOf(env, m.serverId).applyPlan(inputs, {
          actor: "planner",
          reason: `intent rev ${inputs.rev}`,
          audited: true,
        });
        // A ledger that no longer exists or is removed has nothing to plan: its mark is done too.
        if (out.ok && out.outcome === "issued") run.issued++;
        done.push(m.serverId);
      } catch (err) {
        console.warn(`planning server ${m.serverId} failed; retried later`, err);
        failed.push(m);
      }
    }
  };
  await Promise.all(Array.from({ length: Math.min(CONCURRENCY, marks.length) }, worker));
  run.servers += done.length;
  run.failed += failed.length;
  // A mark newer than the inputs (a change committed meanwhile) stays for the next run.
  const stmts = [];
  if (done.length) {
    stmts.push(
      db
        .delete(planMarks)
        .where(
          and(
            sql`${planMarks.serverId} IN (SELECT value FROM json_each(${JSON.stringify(done)}))`,
            lte(planMarks.rev, inputs.rev),
          ),
        ),
    );
  }
  for (const m of failed) {
    const delay = Math.min(MAX_BACKOFF_MS, 1000 * 2 ** m.attempts);
    stmts.push(
      db
        .update(planMarks)
        .set({ attempts: m.attempts + 1, markedAt: Date.now() + delay })
        .where(and(eq(planMarks.serverId, m.serverId), eq(planMarks.rev, m.rev))),
    );
  }
  if (stmts.length) await db.batch(stmts as [(typeof stmts)[number], ...(typeof stmts)[number][]]);
}

/**
 * After an intent change: plan the fleet's marked servers now, within a budget; what is left goes
 * on in the background (waitUntil), and the cron is the backstop for both.
 */
export async function planAfterChange(env: Env, ctx: { waitUntil(p: Promise<unknown>): void }, fleet: string) {
  const run = await runPlanner(env, { fleet, budgetMs: 15_000 });
  if (run.remaining) ctx.waitUntil(runPlanner(env, { fleet }).catch((err) => console.warn("planner run failed", err)));
  return run;
}

/** PATCH /v1/servers/{id} with roles: recorded in the ledger and planned from at once. */
export async function setServerRoles(env: Env, actor: string, id: string, roles: string[]) {
  const ledger = ledgerOf(env, id);
  const current = await ledger.view();
  if (!current) throw notFound("server", id);
  const inputs = await planInputsOf(getDb(env.DB), current.record.fleet_id);
  if (!inputs) throw notFound("fleet", current.record.fleet_id);
  return unwrap(await ledger.applyPlan(inputs, { actor, reason: "roles changed", roles: [...new Set(roles)] }));
}
