/**
 * Rollout workflows. Targets are selected from the D1 index; the (fleet, agent) is claimed in D1
 * (one running rollout per pair: an INSERT admits one claimant) before the Rollout object is
 * created; from then on the object owns everything and releases the claim through its outbox
 * when it ends. A claim whose rollout never started (the workflow died in between) is adopted by
 * the same request sent again (its fingerprint, ./fingerprint.ts), and taken over by any other
 * once it is older than CLAIM_TTL_MS.
 */
import { and, asc, desc, eq, inArray, isNotNull, lt, ne, notInArray, or, type SQL } from "drizzle-orm";
import { getDb, type Db } from "../db/client";
import { agentChannels, agentInstances, rolloutLocks, rollouts, servers } from "../db/schema";
import { StrategyInput } from "../model/strategy";
import type { Env } from "../env";
import { imageForFleet } from "../images/resolve";
import { getFleet } from "../fleets/store";
import { chunk } from "../lib/chunk";
import { iso } from "../lib/time";
import { DomainError, notFound, unknownFleet } from "../domain/errors";
import { visibleFleets, type Principal } from "../domain/principal";
import { inVisibleFleets } from "../db/access";
import { CANCEL_GRACE_S } from "../domain/limits";
import { unwrap } from "../objects/kit/result";
import type { TargetInput } from "./operator";
import {
  ACTIVE_STATES,
  isTerminal,
  type Control,
  type RolloutSpec,
  type RolloutState,
  type StrategySource,
  type TargetState,
} from "./machine";
import type { RolloutInput } from "./schemas";
import { checkStrategy } from "./strategy-check";
import type { Plan } from "./strategy";
import { startFingerprint } from "./fingerprint";
import type { Fetcher } from "../fleetlock/external-check";
import { labelsMatch } from "../model/server/labels";
import { rolloutOf } from "../objects/stubs";
import { waitForWake } from "../objects/kit/wake";
import type { RolloutSummary } from "./views";
import { summaryWaitRequest, type SummaryWaitAnswer } from "./waits";

const CLAIM_TTL_MS = 2 * 60_000;

/** How many unknown names an error lists (the count says the rest). */
const NAMES_SHOWN = 20;

/**
 * The servers of the fleet whose desired config has the agent, filtered by selector and exclude
 * (each naming servers by id or hostname). A name that is no server of the fleet is refused
 * (unknown_server), never silently ignored: a typo in an exclude list would roll out to the very
 * server it meant to spare.
 */
async function selectTargets(
  db: Db,
  input: Pick<RolloutInput, "fleet" | "agent" | "selector" | "exclude">,
): Promise<(TargetInput & { labels: Record<string, string> })[]> {
  const rows = await db
    .select({
      id: servers.id,
      hostname: servers.hostname,
      roles: servers.roles,
      labels: servers.labels,
      rebootGroup: servers.rebootGroup,
    })
    .from(agentInstances)
    .innerJoin(servers, eq(servers.id, agentInstances.serverId))
    .where(
      and(
        eq(agentInstances.fleetId, input.fleet),
        eq(agentInstances.agent, input.agent),
        isNotNull(agentInstances.desiredImage),
        notInArray(servers.state, ["decommissioning", "removed"]),
      ),
    )
    .orderBy(asc(servers.hostname), asc(servers.id));
  const named = (r: { id: string; hostname: string }, names: Set<string>) =>
    names.has(r.id) || names.has(r.hostname.toLowerCase());
  const roles = input.selector?.roles ? new Set(input.selector.roles) : null;
  // The selector's labels are few and the candidates already read: matched here, not in SQL.
  const labels = input.selector?.labels
    ? Object.entries(input.selector.labels).map(([key, value]) => ({ key, value }))
    : null;
  const ids = input.selector?.servers ? new Set(input.selector.servers.map((n) => n.toLowerCase())) : null;
  const exclude = new Set(input.exclude.map((e) => e.toLowerCase()));
  await refuseUnknownNames(db, input.fleet, [...(ids ?? []), ...exclude], rows);
  return rows
    .filter(
      (r) =>
        (!roles || r.roles.some((role) => roles.has(role))) &&
        (!labels || labelsMatch(r.labels, labels)) &&
        (!ids || named(r, ids)),
    )
    .map((r) => ({
      server_id: r.id,
      hostname: r.hostname,
      reboot_group: r.rebootGroup,
      excluded: named(r, exclude),
      labels: r.labels,
    }));
}

/** Names (ids or hostnames) that are no live server of the fleet: 422 unknown_server. */
async function refuseUnknownNames(db: Db, fleet: string, names: string[], known: { id: string; hostname: string }[]) {
  const seen = new Set(known.flatMap((r) => [r.id, r.hostname.toLowerCase()]));
  const rest = [...new Set(names)].filter((n) => !seen.has(n));
  for (const part of chunk(rest, 40)) {
    const found = await db
      .select({ id: servers.id, hostname: servers.hostname })
      .from(servers)
      .where(
        and(
          eq(servers.fleetId, fleet),
          ne(servers.state, "removed"),
          or(inArray(servers.id, part), inArray(servers.hostname, part)),
        ),
      );
    for (const r of found) seen.add(r.id).add(r.hostname.toLowerCase());
  }
  const unknown = rest.filter((n) => !seen.has(n));
  if (unknown.length) {
    const shown =
      unknown.slice(0, NAMES_SHOWN).join(", ") +
      (unknown.length > NAMES_SHOWN ? ` and ${unknown.length - NAMES_SHOWN} more` : "");
    throw new DomainError("unknown_server", `no server of fleet '${fleet}' is named ${shown}`, {
      fleet,
      unknown: unknown.slice(0, 100),
    });
  }
}

/** The agents the fleet's servers are configured with (for a refusal that names them). */
async function agentsOfFleet(db: Db, fleet: string): Promise<string[]> {
  const rows = await db
    .selectDistinct({ agent: agentInstances.agent })
    .from(agentInstances)
    .where(and(eq(agentInstances.fleetId, fleet), isNotNull(agentInstances.desiredImage)))
    .orderBy(asc(agentInstances.agent))
    .limit(50);
  return rows.map((r) => r.agent);
}

/** A rollout that would write no server is a mistake (a typo in the agent, a selector matching nothing) unless asked for. */
async function refuseNoTargets(db: Db, input: RolloutInput, targets: TargetInput[]) {
  if (input.channel_only || targets.length > 0) return;
  const agents = await agentsOfFleet(db, input.fleet);
  const runs = agents.includes(input.agent);
  const what = runs
    ? `no server of fleet '${input.fleet}' running '${input.agent}' matches the selector`
    : `no server of fleet '${input.fleet}' runs agent '${input.agent}'`;
  throw new DomainError(
    "no_targets",
    `${what} (the fleet's servers run: ${agents.join(", ") || "no agent"}); to move only the fleet's channel, pass channel_only: true`,
    { fleet: input.fleet, agent: input.agent, fleet_agents: agents },
  );
}

/**
 * Who holds the (fleet, agent) for this caller: `fresh` when this call inserted the claim;
 * `rolloutId` the rollout to start (another than the one asked for when the same request's claim
 * was adopted); `running` that rollout's summary when it had already started.
 */
interface Claimed {
  fresh: boolean;
  rolloutId: string;
  running: RolloutSummary | null;
}

/**
 * Claims (fleet, agent) for `rolloutId`. A claim held by the same start request (`fingerprint`)
 * is adopted: its rollout is answered if it started and has not ended, else the claim is renewed
 * for this caller to finish the start. Any other holder is refused with rollout_in_progress.
 */
async function claim(
  env: Env,
  db: Db,
  fleet: string,
  agent: string,
  rolloutId: string,
  fingerprint: string | null = null,
): Promise<Claimed> {
  for (let attempt = 0; attempt < 3; attempt++) {
    const inserted = await db
      .insert(rolloutLocks)
      .values({ fleetId: fleet, agent, rolloutId, createdAt: Date.now(), fingerprint })
      .onConflictDoNothing()
      .returning({ id: rolloutLocks.rolloutId });
    if (inserted.length) return { fresh: true, rolloutId, running: null };
    const holder = await db.query.rolloutLocks.findFirst({
      where: and(eq(rolloutLocks.fleetId, fleet), eq(rolloutLocks.agent, agent)),
    });
    if (!holder) continue; // released meanwhile
    if (holder.rolloutId === rolloutId) return { fresh: false, rolloutId, running: null };
    // The claim as this caller read it: a write that finds it changed read stale, and looks again.
    const asRead = and(
      eq(rolloutLocks.fleetId, fleet),
      eq(rolloutLocks.agent, agent),
      eq(rolloutLocks.rolloutId, holder.rolloutId),
      eq(rolloutLocks.createdAt, holder.createdAt),
    );
    const stub = rolloutOf(env, holder.rolloutId);
    const running = await stub.get();
    if (fingerprint !== null && holder.fingerprint === fingerprint && !(running && isTerminal(running.state))) {
      if (running) return { fresh: false, rolloutId: holder.rolloutId, running };
      // Renewed before the start, so no other request's takeover (which deletes the claim it read
      // expired) can slip in between and start a second rollout of the pair.
      const renewed = await db
        .update(rolloutLocks)
        .set({ createdAt: Date.now() })
        .where(asRead)
        .returning({ id: rolloutLocks.rolloutId });
      if (renewed.length) return { fresh: false, rolloutId: holder.rolloutId, running: null };
      continue;
    }
    if (!running && Date.now() - holder.createdAt > CLAIM_TTL_MS) {
      await db.delete(rolloutLocks).where(asRead);
      continue;
    }
    if (running && isTerminal(running.state)) {
      // It has ended and waits only for targets in flight: make sure each has its deadline (a
      // rollout stored before deadlines existed gets them now) and its release is on its way.
      await stub.redrive();
      throw new DomainError(
        "rollout_in_progress",
        `rollout ${holder.rolloutId} (${running.state}) still waits for ${running.counts.applying} target(s) applying and lets '${agent}' go once they end ` +
          `(at most ${CANCEL_GRACE_S} s after a cancel, else their server timeout); an operator can end one: POST /v1/rollouts/${holder.rolloutId}/targets/{server}/end`,
        { rollout_id: holder.rolloutId, state: running.state, applying: running.counts.applying },
      );
    }
    throw new DomainError(
      "rollout_in_progress",
      `rollout ${holder.rolloutId} is already updating '${agent}' in fleet '${fleet}'`,
      {
        rollout_id: holder.rolloutId,
        state: running?.state ?? "starting",
      },
    );
  }
  throw new DomainError("rollout_in_progress", `another rollout of '${agent}' in fleet '${fleet}' is starting; retry`);
}

/**
 * The strategy a new rollout takes: the request's (`strategy: null` asks for one wave, whatever
 * the fleet's default), else the fleet's default for the agent (its channel's `rollout`, set by a
 * fleet spec), else none. A rollout that writes no server (channel_only) takes none.
 */
async function strategyOf(
  db: Db,
  input: RolloutInput,
): Promise<{ strategy: StrategyInput | null; source: StrategySource }> {
  if (input.strategy) return { strategy: input.strategy, source: "request" };
  if (input.strategy === null || input.channel_only) return { strategy: null, source: "none" };
  const [row] = await db
    .select({ rollout: agentChannels.rollout })
    .from(agentChannels)
    .where(and(eq(agentChannels.fleetId, input.fleet), eq(agentChannels.agent, input.agent)))
    .limit(1);
  if (!row?.rollout) return { strategy: null, source: "none" };
  // Parsed as it was when the spec stored it; a default a later release no longer takes is refused, not guessed at.
  const parsed = StrategyInput.safeParse(row.rollout.strategy);
  if (!parsed.success)
    throw new DomainError(
      "invalid_strategy",
      `the fleet's default strategy for '${input.agent}' no longer validates (${parsed.error.issues[0]?.message}); apply its spec again, or send a strategy`,
    );
  return { strategy: parsed.data, source: "fleet_default" };
}

/**
 * A start whose (fleet, agent) is claimed: the rollout to create (or, `started`, the one the same
 * request already created). The first half of createRollout, apart so that a test can stop there,
 * as a runtime that died after the claim would.
 */
export interface ClaimedStart {
  spec: RolloutSpec;
  targets: TargetInput[];
  plan: Plan | null;
  started: RolloutSummary | null;
}

export async function claimStart(
  env: Env,
  actor: string,
  input: RolloutInput,
  newId: () => string = () => crypto.randomUUID(),
  fetcher: Fetcher = (u, i) => fetch(u, i),
): Promise<ClaimedStart> {
  const db = getDb(env.DB);
  const fleet = await getFleet(db, input.fleet);
  if (!fleet) throw unknownFleet(input.fleet);
  // The image as the catalog has it now; every write of the rollout carries exactly this.
  const resolved = await imageForFleet(
    db,
    input.fleet,
    input.image_id ? { image_id: input.image_id } : { image: input.image!, version: input.version! },
    fleet.imagePolicy,
  );
  input = { ...input, image: resolved.image, version: resolved.version };
  const selected = input.channel_only ? [] : await selectTargets(db, input);
  await refuseNoTargets(db, input, selected);
  const { strategy, source } = await strategyOf(db, input);
  const planned = strategy
    ? await checkStrategy(
        db,
        fetcher,
        { fleet: input.fleet, allowLoopbackHttp: env.ALLOW_LOOPBACK_HTTP === "1" },
        strategy,
        selected.filter((t) => !t.excluded),
      ).catch((err: unknown) => {
        // A refusal of the fleet's default says whose strategy it was, and where it is set.
        if (source !== "fleet_default" || !(err instanceof DomainError)) throw err;
        throw new DomainError(
          err.code,
          `the fleet's default strategy for '${input.agent}' (its spec's channels.${input.agent}.rollout; send a strategy, or strategy: null for one wave): ${err.message}`,
          err.details,
        );
      })
    : null;
  const targets: TargetInput[] = selected.map(({ labels: _l, ...t }) =>
    planned && !t.excluded ? { ...t, phase: planned.phaseOf.get(t.server_id) ?? 0 } : t,
  );
  const fingerprint = await startFingerprint(actor, input, strategy, source);
  const claimed = await claim(env, db, input.fleet, input.agent, newId(), fingerprint);
  const spec: RolloutSpec = {
    id: claimed.rolloutId,
    fleet: input.fleet,
    agent: input.agent,
    image: resolved.image,
    version: resolved.version,
    catalog: resolved.catalog ?? null,
    concurrency: input.concurrency,
    server_timeout_s: input.server_timeout_s,
    slow_factor: input.slow_factor ?? null,
    abort: input.abort ?? {},
    update_channel: input.update_channel,
    reboot_slot: input.reboot_slot,
    budget: fleet.disruptionBudget !== null && fleet.disruptionBudget !== undefined,
    strategy_source: source,
    created_by: actor,
    created_at: Date.now(),
  };
  return { spec, targets, plan: planned?.plan ?? null, started: claimed.running };
}

/**
 * Starts a rollout: claims its (fleet, agent), then creates the Rollout object. Sent again (the
 * answer lost, or the runtime died between the two), the same request answers the same rollout,
 * started once.
 */
export async function createRollout(
  env: Env,
  actor: string,
  input: RolloutInput,
  newId?: () => string,
  fetcher?: Fetcher,
): Promise<RolloutSummary> {
  const c = await claimStart(env, actor, input, newId, fetcher);
  return c.started ?? rolloutOf(env, c.spec.id).start(c.spec, c.targets, c.plan);
}

/**
 * The rollout now, or (with `waitMs`) once its version moves past `since` (null: past the one now).
 * The wait is held here, in the Worker, while the Rollout object sleeps: it wakes this request when
 * its core moves (./waits.ts). `signal`: the client hung up.
 */
export async function getRollout(
  env: Env,
  id: string,
  opts: { since: number | null; waitMs: number; signal?: AbortSignal } = { since: null, waitMs: 0 },
) {
  const stub = rolloutOf(env, id);
  const found = (summary: RolloutSummary | null) => {
    if (!summary) throw notFound("rollout", id);
    return summary;
  };
  if (opts.waitMs <= 0) return found(await stub.get());
  const until = Date.now() + opts.waitMs;
  for (;;) {
    const wake = await waitForWake(() => stub.fetch(summaryWaitRequest(opts.since)), until, opts.signal);
    if (wake.kind === "answered") return found((await wake.response.json()) as SummaryWaitAnswer);
    // The object restarted under the wait: with a version to hold, wait on; without, a change may have passed.
    if (wake.kind === "lost" && opts.since !== null && Date.now() < until) continue;
    return found(await stub.get());
  }
}

export async function controlRollout(env: Env, actor: string, id: string, action: Control) {
  const stub = rolloutOf(env, id);
  if (action !== "rollback") return unwrap(await stub.control(action, actor)).summary;
  const current = await stub.get();
  if (!current) throw notFound("rollout", id);
  // A rollback runs again: it needs the (fleet, agent), which another rollout may hold by now.
  const db = getDb(env.DB);
  const { fresh } = await claim(env, db, current.fleet, current.agent, id);
  const result = await stub.control("rollback", actor);
  if (!result.ok && fresh) {
    await db
      .delete(rolloutLocks)
      .where(
        and(
          eq(rolloutLocks.fleetId, current.fleet),
          eq(rolloutLocks.agent, current.agent),
          eq(rolloutLocks.rolloutId, id),
        ),
      );
  }
  return unwrap(result).summary;
}

/** An operator ends one stuck target of the rollout (by server id or hostname). */
export async function endRolloutTarget(env: Env, actor: string, id: string, server: string, reason?: string) {
  return unwrap(await rolloutOf(env, id).endTarget(server, actor, reason));
}

/**
 * A rollout of a fleet the token may not see is answered as one that does not exist (its fleet
 * read from the index; a "*" token reads nothing more).
 */
export async function refuseHiddenRollout(env: Env, principal: Principal, id: string) {
  const visible = visibleFleets(principal);
  if (visible === null) return;
  const [row] = await getDb(env.DB)
    .select({ fleet: rollouts.fleetId })
    .from(rollouts)
    .where(eq(rollouts.id, id))
    .limit(1);
  if (!row || !visible.includes(row.fleet)) throw notFound("rollout", id);
}

/** Rollouts from the D1 index, newest first (one more row than `limit` when another page exists). */
export async function listRollouts(
  env: Env,
  filter: { fleet?: string; agent?: string; state?: RolloutState; visible: readonly string[] | null },
  before: { createdAt: number; id: string } | null,
  limit: number,
) {
  const conds: SQL[] = [];
  const visible = inVisibleFleets(rollouts.fleetId, filter.visible);
  if (visible) conds.push(visible);
  if (filter.fleet) conds.push(eq(rollouts.fleetId, filter.fleet));
  if (filter.agent) conds.push(eq(rollouts.agent, filter.agent));
  if (filter.state) conds.push(eq(rollouts.state, filter.state));
  if (before) {
    // Newest first; ties on created_at broken by id.
    conds.push(
      or(
        lt(rollouts.createdAt, before.createdAt),
        and(eq(rollouts.createdAt, before.createdAt), lt(rollouts.id, before.id)),
      )!,
    );
  }
  return getDb(env.DB)
    .select()
    .from(rollouts)
    .where(conds.length ? and(...conds) : undefined)
    .orderBy(desc(rollouts.createdAt), desc(rollouts.id))
    .limit(limit + 1);
}

/** The rollout's targets in order from `after` (its object's sequence); one more than `limit` when another page exists. */
export async function rolloutTargets(
  env: Env,
  id: string,
  opts: { pass?: number; state?: TargetState; after: number; limit: number },
) {
  const rows = await rolloutOf(env, id).targets(opts);
  if (!rows) throw notFound("rollout", id);
  return rows;
}

/** The rollout's events, oldest first, after the event id `after`. */
export async function rolloutEvents(env: Env, id: string, opts: { after: number; limit: number }) {
  const rows = await rolloutOf(env, id).events(opts);
  if (!rows) throw notFound("rollout", id);
  return rows;
}

/** The fleet's rollouts in progress (running, paused, rolling back), newest first, from the index's partial index. */
export async function activeRollouts(env: Env, fleet: string, limit = 20) {
  const rows = await getDb(env.DB)
    .select()
    .from(rollouts)
    .where(and(sqlActive(), eq(rollouts.fleetId, fleet)))
    .orderBy(desc(rollouts.createdAt))
    .limit(limit);
  return rows.map((r) => ({
    id: r.id,
    agent: r.agent,
    image: r.image,
    state: r.state,
    pass: r.pass,
    counts: r.counts,
    created_at: iso(r.createdAt),
  }));
}

/**
 * Cron backstop: rollouts still moving whose row has not changed for a while get re-driven (their
 * timers re-armed, their outbox flushed). Reads only active rows, through a partial index.
 */
export async function redriveRollouts(env: Env, now: number, quietMs = 60_000, limit = 50) {
  const db = getDb(env.DB);
  const rows = await db
    .select({ id: rollouts.id })
    .from(rollouts)
    .where(and(sqlActive(), lt(rollouts.updatedAt, now - quietMs)))
    .orderBy(asc(rollouts.updatedAt))
    .limit(limit);
  await Promise.all(
    rows.map((r) =>
      rolloutOf(env, r.id)
        .redrive()
        .catch((err) => console.error("rollout redrive failed", r.id, String(err))),
    ),
  );
  return rows.length;
}

/** Written as the partial index's own predicate, so the query uses it. */
const sqlActive = () => inArray(rollouts.state, [...ACTIVE_STATES]);
