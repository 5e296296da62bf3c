/**
 * Reboot-coordination workflows, for operators and for hosts (the FleetLock protocol). The fleet's
 * settings live in D1 and travel with each operator call; the coordinator owns the key, the groups
 * and their holders, and audits through its own outbox.
 */
import { getDb } from "../db/client";
import type { Env } from "../env";
import { getFleet, fleetSettings } from "../fleets/store";
import type { GroupChange } from "./semaphore";
import { DomainError, notFound } from "../domain/errors";
import { outboundUrlProblem } from "../lib/url";
import type { GateConfig } from "./gates";
import { unwrap } from "../objects/kit/result";
import { randomSecret, sha256Hex } from "../lib/crypto";
import { coordinatorOf } from "../objects/stubs";
import { waitForWake, type Wake } from "../objects/kit/wake";
import type { ParkedAnswer } from "./parked";
import { failure, type ClientParams } from "./protocol";
import { MAX_QUEUE_WAIT_S } from "./queue";
import { preRebootWaitRequest } from "./waits";

async function fleetOf(env: Env, id: string) {
  const row = await getFleet(getDb(env.DB), id);
  if (!row) throw notFound("fleet", id);
  return row;
}

export async function listGroups(env: Env, fleet: string) {
  const row = await fleetOf(env, fleet);
  return { row, items: await coordinatorOf(env, fleet).listGroups(fleetSettings(row)) };
}

export async function getGroup(env: Env, fleet: string, group: string) {
  const row = await fleetOf(env, fleet);
  return unwrap(await coordinatorOf(env, fleet).getGroup(fleetSettings(row), group)).group;
}

export async function putGroup(env: Env, actor: string, fleet: string, group: string, change: GroupChange) {
  checkGateUrls(env, change.gates);
  const row = await fleetOf(env, fleet);
  return coordinatorOf(env, fleet).putGroup(fleetSettings(row), group, change, actor);
}

// ---- health gates and holds ----

/** An external check must be a URL Harbormaster may call: https (loopback http in local runs). */
function checkGateUrls(env: Env, gates: GateConfig | null | undefined) {
  const url = gates?.external?.url;
  const problem = url ? outboundUrlProblem(url, env.ALLOW_LOOPBACK_HTTP === "1") : null;
  if (problem)
    throw new DomainError("validation_failed", `gates.external.url ${problem}`, [
      { path: "gates.external.url", message: problem },
    ]);
}

export async function getFleetGates(env: Env, fleet: string) {
  const row = await fleetOf(env, fleet);
  return coordinatorOf(env, fleet).fleetGates(fleetSettings(row));
}

export async function putFleetGates(env: Env, actor: string, fleet: string, gates: GateConfig) {
  checkGateUrls(env, gates);
  const row = await fleetOf(env, fleet);
  return coordinatorOf(env, fleet).putFleetGates(fleetSettings(row), gates, actor);
}

/** Holds a group (or, with `group` null, every group of the fleet); `hold` null lifts it. */
export async function setHold(
  env: Env,
  actor: string,
  fleet: string,
  group: string | null,
  hold: { reason: string; until?: string; for_s?: number } | null,
) {
  const row = await fleetOf(env, fleet);
  const until = hold?.until ? Date.parse(hold.until) : hold?.for_s ? Date.now() + hold.for_s * 1000 : null;
  if (until !== null && until <= Date.now())
    throw new DomainError("validation_failed", "until is in the past", [
      { path: "until", message: "must be in the future" },
    ]);
  const value = hold ? { reason: hold.reason, until } : null;
  return unwrap(await coordinatorOf(env, fleet).setHold(fleetSettings(row), group, value, actor)).hold;
}

export async function forceRelease(env: Env, actor: string, fleet: string, group: string, id: string) {
  const row = await fleetOf(env, fleet);
  return unwrap(await coordinatorOf(env, fleet).forceRelease(fleetSettings(row), group, id, actor));
}

export async function dequeueHost(env: Env, actor: string, fleet: string, group: string, id: string) {
  const row = await fleetOf(env, fleet);
  return unwrap(await coordinatorOf(env, fleet).dequeueHost(fleetSettings(row), group, id, actor));
}

/** What drift fixes hold of the fleet's disruption budget (docs/reboot-safety.md#drift-fixes). */
export async function listFixHolds(env: Env, fleet: string) {
  const row = await fleetOf(env, fleet);
  return { row, items: await coordinatorOf(env, fleet).fixHolds(fleetSettings(row)) };
}

/** An operator frees a drift fix's unit for one server (`ref`: its id, hostname or fleet/hostname). */
export async function releaseFixHold(env: Env, actor: string, fleet: string, ref: string) {
  const row = await fleetOf(env, fleet);
  return unwrap(await coordinatorOf(env, fleet).releaseFixHold(fleetSettings(row), ref, actor)).released;
}

/** The coordinator holds the only copy of the key's hash; the key itself is shown once. */
export async function rotateFleetlockKey(env: Env, actor: string, fleet: string) {
  const row = await fleetOf(env, fleet);
  const key = randomSecret();
  await coordinatorOf(env, fleet).setKey(fleetSettings(row), await sha256Hex(key), actor);
  return key;
}

// ---- the FleetLock protocol (hosts) ----

/** Whether the key (its digest) is the fleet's; a fleet that does not exist has none. */
export const keyMatches = (env: Env, fleet: string, keyHash: string) => coordinatorOf(env, fleet).keyMatches(keyHash);

/** UnlockIfHeld: the id's slot is released if it holds one. */
export const steadyState = (env: Env, fleet: string, keyHash: string, params: { id: string; group: string }) =>
  coordinatorOf(env, fleet).steadyState(keyHash, params);

/**
 * A pre-reboot may wait in the group's queue: the wait is held here, in the Worker, on a waiter
 * socket to the coordinator, which sleeps meanwhile and wakes it with the answer (./waits.ts,
 * ./parked.ts). If the client goes away (`signal`), the waiter is closed, which tells the
 * coordinator (a grant that comes later is kept unclaimed for the host). If the waiter closes
 * without an answer (the coordinator restarted: a deploy, a reset) or the place's deadline comes,
 * the request looks again with `resume`: the host's durable place is picked up again, its grant
 * answered or its refusal given, and nothing is parked anew.
 */
export async function preReboot(
  env: Env,
  request: { signal?: AbortSignal },
  fleet: string,
  keyHash: string,
  params: ClientParams,
): Promise<ParkedAnswer> {
  const { signal } = request;
  // A bound on the whole wait past the longest queue_wait_s; the coordinator names the deadline.
  const until = Date.now() + (MAX_QUEUE_WAIT_S + 60) * 1000;
  let resume = false;
  for (let failures = 0; ;) {
    let wake: Wake;
    try {
      wake = await waitForWake(
        () => coordinatorOf(env, fleet).fetch(preRebootWaitRequest(keyHash, params, resume)),
        until,
        signal,
      );
    } catch (err) {
      if (signal?.aborted || ++failures > MAX_RESUMES || !restarted(err)) throw err;
      resume = true;
      continue;
    }
    if (wake.kind === "answered") return (await wake.response.json()) as ParkedAnswer;
    if (wake.kind === "changed" && wake.answer) return wake.answer as ParkedAnswer;
    // Nobody reads this answer; the host keeps its place.
    if (wake.kind === "aborted") return failure("semaphore_full", "the client went away while it waited in the queue");
    // Past every deadline the coordinator can name (it always names one sooner): give up, not spin.
    if (wake.kind === "timeout") return failure("semaphore_full", "the wait in the queue ran out");
    if (wake.kind === "lost" && ++failures > MAX_RESUMES)
      throw new Error("the reboot coordinator kept closing the wait");
    resume = true;
  }
}

/** Restarts a waiting request survives in a row; each resume parks nothing new, so this only bounds a crash loop. */
const MAX_RESUMES = 5;

/** Whether an RPC failed because the object was reset (deploy, eviction), not because of its own bug. */
function restarted(err: unknown) {
  const e = err as { retryable?: boolean; durableObjectReset?: boolean } | null;
  return Boolean(e && (e.durableObjectReset || e.retryable));
}
