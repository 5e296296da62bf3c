/**
 * Reboot-coordination workflows for operators. The fleet's settings live in D1 and travel with
 * each call; the coordinator owns the key, the groups and their holders, and audits through its
 * own outbox.
 */
import { getDb } from "../db/client";
import type { Env } from "../env";
import { getFleet, fleetSettings } from "../fleets/store";
import type { GroupChange } from "./semaphore";
import { notFound, unwrap } from "../http/errors";
import { randomSecret, sha256Hex } from "../lib/crypto";
import { coordinatorOf } from "../objects/stubs";

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
  const row = await fleetOf(env, fleet);
  return coordinatorOf(env, fleet).putGroup(fleetSettings(row), group, change, actor);
}

export async function forceRelease(env: Env, actor: string, fleet: string, group: string, id: string) {
  const row = await fleetOf(env, fleet);
  return unwrap(await coordinatorOf(env, fleet).forceRelease(fleetSettings(row), group, id, actor));
}

/** The coordinator holds the only copy of the key's hash; the key itself is shown once. */
export async function rotateFleetlockKey(env: Env, actor: string, fleet: string) {
  const row = await fleetOf(env, fleet);
  const key = randomSecret();
  await coordinatorOf(env, fleet).setKey(fleetSettings(row), await sha256Hex(key), actor);
  return key;
}
