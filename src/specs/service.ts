/**
 * Fleet specs (issue 19): the fleet as one declarative document, what a spec would change, and
 * its apply — all or nothing, at most once per state the operator saw (If-Match), with one audit
 * row and one planner run. D1 owns the intent and commits first, in one batch; the coordinator's
 * part (reboot groups) rides in that batch as a fleet task, delivered at once and by the cron
 * until done, and shown as applied meanwhile (./store.ts).
 */
import { pagesChanged } from "../console/notices";
import { and, eq } from "drizzle-orm";
import type { ZodError } from "zod";
import { getDb, type Db } from "../db/client";
import { agentChannels } from "../db/schema";
import { DomainError, notFound } from "../domain/errors";
import type { Env } from "../env";
import { runFleetTasks } from "../fleets/tasks";
import type { Background } from "../http/background";
import { changeIntent } from "../intent/service";
import { planAfterChange } from "../planner/service";
import { applyStatements } from "./apply";
import { specHash } from "./canonical";
import { planSpec, summaryOf, writes, type SpecPlan } from "./diff";
import type { FleetSpec } from "./schemas";
import { readFleetState, serversToReplan, specOf, type FleetState } from "./store";
import { referenceProblems, schemaProblems, type Problem } from "./validate";

const etagOf = async (state: FleetState) => `"${await specHash(specOf(state))}"`;

async function stateOf(env: Env, db: Db, fleet: string) {
  const state = await readFleetState(env, db, fleet);
  if (!state) throw notFound("fleet", fleet);
  return state;
}

/** GET …/spec: the fleet as a spec, and its ETag. */
export async function fleetSpec(env: Env, fleet: string) {
  const state = await stateOf(env, getDb(env.DB), fleet);
  return { spec: specOf(state), etag: await etagOf(state) };
}

function refuse(problems: Problem[]) {
  if (problems.length === 0) return;
  throw new DomainError("invalid_spec", `the spec has ${problems.length} problem(s); nothing was changed`, { problems });
}

const fleetChannels = async (db: Db, fleet: string) =>
  (await db.select({ agent: agentChannels.agent }).from(agentChannels).where(and(eq(agentChannels.fleetId, fleet)))).map((r) => r.agent);

/** A spec its schema refused: its schema's problems and its references', all in one answer. */
export async function refuseInvalidSpec(env: Env, fleet: string, raw: unknown, prune: boolean, error: ZodError): Promise<never> {
  const known = prune ? [] : await fleetChannels(getDb(env.DB), fleet);
  refuse([...schemaProblems(error), ...referenceProblems(raw, fleet, known)]);
  throw new Error("unreachable: a schema failure has problems");
}

const referencesOf = (state: FleetState, spec: FleetSpec, prune: boolean) =>
  referenceProblems(spec, state.row.id, prune ? [] : Object.keys(state.channels));

function diffOf(state: FleetState, plan: SpecPlan, prune: boolean, etag: string) {
  return {
    fleet: state.row.id,
    prune,
    equal: plan.items.length === 0,
    etag,
    summary: summaryOf(plan.items),
    items: plan.items,
  };
}

const scopeOf = (plan: SpecPlan) => (plan.replan.fleet ? "fleet" : plan.replan.roles.length ? "roles" : "none") as "fleet" | "roles" | "none";

/** POST …/spec:diff: what the spec would change, and whom the planner would re-plan; changes nothing. */
export async function diffFleetSpec(env: Env, fleet: string, spec: FleetSpec, prune: boolean) {
  const db = getDb(env.DB);
  const state = await stateOf(env, db, fleet);
  refuse(referencesOf(state, spec, prune));
  const plan = planSpec(state, spec, prune);
  const replan = await serversToReplan(db, fleet, plan.replan);
  return { ...diffOf(state, plan, prune, await etagOf(state)), replan: { scope: scopeOf(plan), roles: plan.replan.roles, ...replan } };
}

/** `If-Match` as RFC 9110 §13.1.1 reads it: `*`, or a list of strong tags one of which is current. */
export function ifMatches(header: string, etag: string) {
  if (header.trim() === "*") return true;
  return header.split(",").some((t) => t.trim() === etag);
}

/**
 * PUT …/spec: the apply. Refused whole (nothing written) for any problem of the spec, or 412 when
 * the fleet is no longer what `If-Match` names; a spec equal to the fleet writes nothing.
 */
export async function applyFleetSpec(
  env: Env,
  ctx: Background,
  actor: string,
  fleet: string,
  spec: FleetSpec,
  opts: { prune: boolean; ifMatch?: string },
) {
  const db = getDb(env.DB);
  const spec_hash = await specHash(spec);
  const { state, plan, etag } = await changeIntent(db, fleet, async ({ rev }) => {
    const state = await stateOf(env, db, fleet);
    const etag = await etagOf(state);
    if (opts.ifMatch !== undefined && !ifMatches(opts.ifMatch, etag)) {
      throw new DomainError("precondition_failed", `the fleet's spec changed since ${opts.ifMatch}: it is ${etag} now; diff again`, {
        etag,
      });
    }
    refuse(referencesOf(state, spec, opts.prune));
    const plan = planSpec(state, spec, opts.prune);
    const result = { state, plan, etag };
    if (!writes(plan)) return { statements: [], result };
    return { statements: applyStatements(db, actor, fleet, rev + 1, plan, { spec_hash, prune: opts.prune }), result };
  });
  const changed = writes(plan);
  if (changed) pagesChanged(env, ctx, fleet, "fleet");
  let pending = state.pending !== null;
  if (changed && (plan.groups || plan.lockSettings)) pending = (await runFleetTasks(env, { fleet })).failed > 0;
  const planning = changed && scopeOf(plan) !== "none" ? await planAfterChange(env, ctx, fleet) : null;
  const after = changed ? await etagOf(await stateOf(env, db, fleet)) : etag;
  return {
    ...diffOf(state, plan, opts.prune, after),
    replan: { scope: scopeOf(plan), roles: plan.replan.roles, servers: planning?.servers ?? 0, sample: [] },
    changed,
    spec_hash,
    planning,
    coordinator: { pending },
  };
}
