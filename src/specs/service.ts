/**
 * Fleet specs (docs/fleets-as-code.md): the fleet as one declarative document, what a spec would change, and
 * its apply — all or nothing, at most once per state the operator saw (If-Match), with one audit
 * row and one planner run. D1 owns the intent and commits first, in one batch; the coordinator's
 * part (reboot groups) rides in that batch as a fleet task, delivered at once and by the cron
 * until done, and shown as applied meanwhile (./store.ts).
 */
import { imageForFleet } from "../images/resolve";
import { pagesChanged } from "../notices/notices";
import { and, eq } from "drizzle-orm";
import { auditInsert } from "../db/audit";
import type { ZodError } from "zod";
import { getDb, type Db } from "../db/client";
import { isUniqueViolation } from "../db/errors";
import { agentChannels, fleets } from "../db/schema";
import { DomainError, notFound } from "../domain/errors";
import type { Env } from "../env";
import { FleetInput } from "../fleets/schemas";
import { changeIntent } from "../fleets/service";
import { bumpIntentRev, isIntentConflict, removalPending, type FleetRow } from "../fleets/store";
import { runFleetTasks } from "../fleets/tasks";
import type { Background } from "../http/background";
import { planAfterChange } from "../planner/service";
import { applyStatements } from "./apply";
import { specHash } from "./canonical";
import { planSpec, summaryOf, writes, type SpecPlan } from "./diff";
import { sha256Hex } from "../lib/crypto";
import { coordinatorOf } from "../objects/stubs";
import type { FleetSpec } from "./schemas";
import { missingSecrets, sentSecrets, webhookCountProblems } from "./webhooks";
import { readFleetState, serversToReplan, specOf, withLiveLabels, type FleetState } from "./store";
import { labelCountProblems } from "./spec-servers";
import { rolloutUrlProblems } from "./rollout-defaults";
import { accessAboveApplier } from "./access";
import type { Scope } from "../domain/enums";
import { referenceProblems, schemaProblems, webhookUrlProblems, type Problem } from "./validate";

const etagOf = async (state: FleetState) => `"${await specHash(specOf(state))}"`;

async function stateOf(env: Env, db: Db, fleet: string) {
  const read = await readFleetState(env, db, fleet);
  if (!read) throw notFound("fleet", fleet);
  return read.state;
}

/** The row a fleet created by a spec starts from: POST /v1/fleets's defaults (the spec's settings follow). */
const newFleetRow = (fleet: string): FleetRow => {
  const d = FleetInput.parse({ id: fleet });
  return {
    id: fleet,
    capabilities: {},
    staleAfterS: d.stale_after_s,
    lockTtlS: d.lock_ttl_s,
    allowUnknownIds: d.allow_unknown_ids,
    defaultGroupSlots: d.default_group_slots,
    disruptionBudget: d.disruption_budget,
    imagePolicy: d.image_policy,
    fleetlockKeyHash: null,
    // No webhook yet: its coordinator publishes when one asks (src/fleetlock/health-watch.ts).
    healthWatch: 0,
    createdAt: Date.now(),
  };
};

/** The fleet as it is, or (`exists: false`) as a spec that creates it finds it. */
async function stateOrNew(env: Env, db: Db, fleet: string) {
  return (await readFleetState(env, db, fleet, () => newFleetRow(fleet)))!;
}

/** GET …/spec: the fleet as a spec, and its ETag. */
export async function fleetSpec(env: Env, fleet: string) {
  const state = await stateOf(env, getDb(env.DB), fleet);
  return { spec: specOf(state), etag: await etagOf(state) };
}

function refuse(problems: Problem[]) {
  if (problems.length === 0) return;
  throw new DomainError("invalid_spec", `the spec has ${problems.length} problem(s); nothing was changed`, {
    problems,
  });
}

const fleetChannels = async (db: Db, fleet: string) =>
  (
    await db
      .select({ agent: agentChannels.agent })
      .from(agentChannels)
      .where(and(eq(agentChannels.fleetId, fleet)))
  ).map((r) => r.agent);

const loopback = (env: Env) => env.ALLOW_LOOPBACK_HTTP === "1";

/**
 * A spec its schema refused: its schema's problems and its references', all in one answer.
 * `errors`: the spec's own (paths in the document) and those of the secrets sent with it.
 */
export async function refuseInvalidSpec(
  env: Env,
  fleet: string,
  raw: unknown,
  prune: boolean,
  errors: ZodError[],
): Promise<never> {
  const known = prune ? [] : await fleetChannels(getDb(env.DB), fleet);
  refuse([
    ...errors.flatMap(schemaProblems),
    ...referenceProblems(raw, fleet, known),
    ...webhookUrlProblems(raw, loopback(env)),
    ...rolloutUrlProblems(raw, loopback(env)),
  ]);
  throw new Error("unreachable: a schema failure has problems");
}

/**
 * The channels a spec writes, resolved against the image catalog under the fleet's image policy
 * as the spec leaves it: a catalog image is stored with its fields, and in a fleet that takes
 * only catalog images one the catalog lacks is a problem of the spec (invalid_spec, with its path).
 */
async function resolveChannels(db: Db, state: FleetState, spec: FleetSpec, plan: SpecPlan) {
  const policy = spec.settings?.image_policy ?? state.row.imagePolicy;
  const problems: Problem[] = [];
  const write = await Promise.all(
    plan.channels.write.map(async (c) => {
      // Only the default rollout changes: the image stays as it was resolved.
      if (!c.image) return c;
      try {
        return { ...c, input: await imageForFleet(db, state.row.id, c.input, policy) };
      } catch (err) {
        if (!(err instanceof DomainError) || err.code !== "image_not_found") throw err;
        problems.push({ path: `channels.${c.agent}`, message: `image_not_found: ${err.message}` });
        return c;
      }
    }),
  );
  refuse(problems);
  plan.channels.write = write;
}

/** A spec and the secrets sent with it (by environment variable name). */
export interface SpecInput {
  spec: FleetSpec;
  secrets: Record<string, string>;
}

/** The SHA-256 of each secret sent for the spec's webhooks, by webhook name. */
async function sentDigests(input: SpecInput) {
  const sent = sentSecrets(input.spec.webhooks ?? {}, input.secrets);
  const digests: Record<string, string> = {};
  for (const [name, secret] of Object.entries(sent)) digests[name] = await sha256Hex(secret);
  return { sent, digests };
}

const referencesOf = (env: Env, state: FleetState, spec: FleetSpec, prune: boolean) => [
  ...referenceProblems(spec, state.row.id, prune ? [] : Object.keys(state.channels)),
  ...webhookUrlProblems(spec, loopback(env)),
  ...rolloutUrlProblems(spec, loopback(env)),
];

function diffOf(state: FleetState, plan: SpecPlan, prune: boolean, etag: string | null, exists = true) {
  return {
    fleet: state.row.id,
    prune,
    exists,
    // A fleet that does not exist differs from any spec: applying it creates the fleet.
    equal: exists && plan.items.length === 0,
    etag,
    summary: summaryOf(plan.items),
    items: plan.items,
  };
}

const scopeOf = (plan: SpecPlan) =>
  (plan.replan.fleet ? "fleet" : plan.replan.roles.length ? "roles" : "none") as "fleet" | "roles" | "none";

/** POST …/spec:diff: what the spec would change, and whom the planner would re-plan; changes nothing. */
export async function diffFleetSpec(env: Env, fleet: string, input: SpecInput, prune: boolean) {
  const db = getDb(env.DB);
  const { spec } = input;
  const read = await stateOrNew(env, db, fleet);
  const state = await withLiveLabels(db, read.state, Object.keys(spec.servers ?? {}));
  const exists = read.exists;
  refuse([...referencesOf(env, state, spec, prune), ...labelCountProblems(state.servers, spec.servers ?? {})]);
  const plan = planSpec(state, spec, prune, (await sentDigests(input)).digests);
  refuse(webhookCountProblems(state.webhooks, plan.items));
  await resolveChannels(db, state, spec, plan);
  const replan = await serversToReplan(db, fleet, plan.replan);
  const etag = exists ? await etagOf(state) : null;
  return {
    ...diffOf(state, plan, prune, etag, exists),
    replan: { scope: scopeOf(plan), roles: plan.replan.roles, ...replan },
  };
}

/**
 * `If-Match` as RFC 9110 §13.1.1 reads it: `*`, or a list of strong tags one of which is current;
 * a fleet that does not exist (`etag` null) matches nothing, not even `*`.
 */
function ifMatches(header: string, etag: string | null) {
  if (etag === null) return false;
  if (header.trim() === "*") return true;
  return header.split(",").some((t) => t.trim() === etag);
}

/** The apply's preconditions (RFC 9110 §13.1.1–2): the fleet as If-Match names it, or absent as If-None-Match: * asks. */
function checkPreconditions(etag: string | null, opts: { ifMatch?: string; ifNoneMatch?: string }) {
  const failed = (why: string) => new DomainError("precondition_failed", why, { etag });
  if (opts.ifMatch !== undefined && !ifMatches(opts.ifMatch, etag)) {
    throw failed(
      etag === null
        ? `fleet does not exist, so If-Match ${opts.ifMatch} does not hold; apply without If-Match (or with If-None-Match: *) to create it`
        : `the fleet's spec changed since ${opts.ifMatch}: it is ${etag} now; diff again`,
    );
  }
  if (
    opts.ifNoneMatch !== undefined &&
    etag !== null &&
    (opts.ifNoneMatch.trim() === "*" || ifMatches(opts.ifNoneMatch, etag))
  ) {
    throw failed(
      `the fleet exists (${etag}) and If-None-Match is ${opts.ifNoneMatch}; diff it and apply with If-Match`,
    );
  }
}

/**
 * `applier`: the applying token's scope, the most the spec's access section may grant or take away;
 * left out, "read": no access row is written at all.
 */
type ApplyOpts = { prune: boolean; ifMatch?: string; ifNoneMatch?: string; applier?: Scope };

/**
 * The apply's plan of a spec on `state`, refused with every problem (references, URLs, new
 * webhooks without a secret). The secrets it sets are staged in the coordinator, which keeps
 * them, before the D1 batch commits (src/webhooks/spec.ts): its task carries only the stage's id.
 */
async function decideApply(env: Env, read: FleetState, input: SpecInput, opts: ApplyOpts) {
  const { prune } = opts;
  const { sent, digests } = await sentDigests(input);
  const state = await withLiveLabels(getDb(env.DB), read, Object.keys(input.spec.servers ?? {}));
  const plan = planSpec(state, input.spec, prune, digests);
  refuse([
    ...referencesOf(env, state, input.spec, prune),
    ...labelCountProblems(state.servers, input.spec.servers ?? {}),
    ...missingSecrets(plan.items, input.spec.webhooks ?? {}, sent),
    ...webhookCountProblems(state.webhooks, plan.items),
    ...accessAboveApplier(plan.items, opts.applier ?? "read"),
  ]);
  await resolveChannels(getDb(env.DB), state, input.spec, plan);
  const hooks = plan.webhooks;
  if (hooks?.needSecret.length) {
    const stage = await coordinatorOf(env, state.row.id).stageWebhookSecrets(
      Object.fromEntries(hooks.needSecret.map((n) => [n, sent[n]])),
    );
    for (const name of hooks.needSecret) hooks.webhooks[name] = { ...hooks.webhooks[name], secret_stage: stage };
  }
  return plan;
}

/**
 * A spec that creates its fleet: the fleet's row, its creation's audit row and the whole spec's
 * statements in one batch, with the first bump of its intent revision. null: the fleet was created
 * meanwhile (by POST /v1/fleets or another apply), and the apply is decided again as an update.
 */
async function createFromSpec(
  env: Env,
  actor: string,
  fleet: string,
  input: SpecInput,
  spec_hash: string,
  opts: ApplyOpts,
) {
  const db = getDb(env.DB);
  if (await removalPending(db, fleet)) {
    throw new DomainError(
      "fleet_removal_pending",
      `fleet '${fleet}' was deleted and is still being cleaned up; retry shortly`,
    );
  }
  const { state, exists } = await stateOrNew(env, db, fleet);
  if (exists) return null;
  checkPreconditions(null, opts);
  const plan = await decideApply(env, state, input, opts);
  const { fleetlockKeyHash: _k, ...row } = state.row;
  try {
    await db.batch([
      bumpIntentRev(db, fleet, state.rev),
      db.insert(fleets).values(row),
      auditInsert(db, {
        actor,
        action: "fleet.create",
        target: `fleet:${fleet}`,
        details: { id: fleet, via: "fleet.spec.apply", spec_hash },
      }),
      ...applyStatements(db, actor, fleet, state.rev + 1, plan, { spec_hash, prune: opts.prune }),
    ]);
  } catch (err) {
    if (isUniqueViolation(err) || isIntentConflict(err)) return null;
    throw err;
  }
  return { state, plan, etag: null };
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
  input: SpecInput,
  opts: ApplyOpts,
) {
  const db = getDb(env.DB);
  // The document's hash: the secrets sent beside it are no part of it (nor of the audit entry).
  const spec_hash = await specHash(input.spec);
  const update = () =>
    changeIntent(db, fleet, async ({ rev }) => {
      const state = await stateOf(env, db, fleet);
      const etag: string | null = await etagOf(state);
      checkPreconditions(etag, opts);
      const plan = await decideApply(env, state, input, opts);
      const result = { state, plan, etag };
      if (!writes(plan)) return { statements: [], result };
      return { statements: applyStatements(db, actor, fleet, rev + 1, plan, { spec_hash, prune: opts.prune }), result };
    });
  // An existing fleet (the common case) is read once; only a missing one takes the creation path,
  // and one created meanwhile by someone else is then updated (or refused by its preconditions).
  let created: Awaited<ReturnType<typeof createFromSpec>> = null;
  let outcome;
  try {
    outcome = await update();
  } catch (err) {
    if (!(err instanceof DomainError && err.code === "not_found")) throw err;
    created = await createFromSpec(env, actor, fleet, input, spec_hash, opts);
    outcome = created ?? (await update());
  }
  const { state, plan, etag } = outcome;
  const changed = created !== null || writes(plan);
  if (changed) pagesChanged(env, ctx, fleet, "fleet");
  let pending = state.pending !== null || state.webhooks.pending !== null || Object.keys(state.servers.owed).length > 0;
  if (writes(plan) && (plan.groups || plan.lockSettings || plan.webhooks || plan.servers.task))
    pending = (await runFleetTasks(env, { fleet })).failed > 0;
  const planning = changed && scopeOf(plan) !== "none" ? await planAfterChange(env, ctx, fleet) : null;
  const after = changed ? await etagOf(await stateOf(env, db, fleet)) : etag!;
  return {
    ...diffOf(state, plan, opts.prune, after, created === null),
    etag: after,
    replan: { scope: scopeOf(plan), roles: plan.replan.roles, servers: planning?.servers ?? 0, sample: [] },
    changed,
    created: created !== null,
    spec_hash,
    planning,
    coordinator: { pending },
  };
}
