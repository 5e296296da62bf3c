/**
 * Server workflows that span bindings. Each follows one rule: the object that owns the fact
 * commits first, and its outbox brings the other bindings along, so no step needs an undo and a
 * crash between any two steps leaves nothing dangling:
 * - fleetlock_id uniqueness is the fleet coordinator's: the id is reserved there first; a
 *   reservation whose workflow died expires (RESERVATION_TTL_MS) and frees the id again;
 * - the ledger then commits the server and enqueues its index row, token row, audit row and the
 *   confirmation of its FleetLock identity.
 */
import { issueToken } from "../auth/tokens";
import { getDb } from "../db/client";
import type { Env } from "../env";
import { getFleet } from "../fleets/store";
import { ApiError, apiErrorOf, notFound, unwrap } from "../http/errors";
import { fail } from "../objects/kit/result";
import type { ServerView } from "../ledger/durable-object";
import type { ServerRecord } from "../ledger/record";
import type { DesiredConfigInput } from "../ledger/schemas";
import { ledgerOf, coordinatorOf } from "../objects/stubs";
import { catchUpPlan, firstPlan } from "../planner/service";

export interface RegisterInput {
  fleet: string;
  hostname: string;
  kind: ServerRecord["kind"];
  roles: string[];
  reboot_group: string;
  fleetlock_id?: string;
}

export async function registerServer(
  env: Env,
  actor: string,
  input: RegisterInput,
  newId: () => string = () => crypto.randomUUID(),
): Promise<{ view: ServerView; token: string }> {
  const fleet = await getFleet(getDb(env.DB), input.fleet);
  if (!fleet) throw new ApiError(422, "unknown_fleet", `fleet '${input.fleet}' does not exist`);
  const id = newId();
  if (input.fleetlock_id) unwrap(await coordinatorOf(env, fleet.id).reserveClientId(input.fleetlock_id, id));
  const { token, hash } = await issueToken("server", id);
  const record: ServerRecord = {
    id,
    fleet_id: fleet.id,
    hostname: input.hostname.toLowerCase(),
    kind: input.kind,
    roles: input.roles,
    reboot_group: input.reboot_group,
    fleetlock_id: input.fleetlock_id ?? null,
    state: "provisioning",
    stale_after_s: fleet.staleAfterS,
    created_at: Date.now(),
    token_hash: hash,
    token_id: id,
  };
  // The first desired config is the plan: the server's roles, the fleet's capabilities and channels.
  const first = await firstPlan(env, fleet.id, record.roles);
  const ledger = ledgerOf(env, id);
  const registered = await ledger.register(record, first.agents, { actor, details: input, plan_rev: first.rev });
  // An intent change that committed meanwhile could not mark this server (no index row yet).
  const caughtUp = await catchUpPlan(env, id, fleet.id, first.rev);
  return { view: caughtUp ?? registered, token };
}

export async function patchServerIdentity(
  env: Env,
  actor: string,
  id: string,
  input: { fleetlock_id?: string | null; reboot_group?: string },
): Promise<ServerView> {
  const ledger = ledgerOf(env, id);
  const current = await ledger.view();
  if (!current) throw notFound("server", id);
  // Refused before reserving anything: a reservation for a PATCH that cannot land would hold the
  // id from other servers until it expired.
  if (current.record.state === "removed") throw apiErrorOf(fail("server_removed", "a removed server cannot be changed"));
  const before = { fleetlock_id: current.record.fleetlock_id, reboot_group: current.record.reboot_group };
  const after = {
    fleetlock_id: input.fleetlock_id === undefined ? before.fleetlock_id : input.fleetlock_id,
    reboot_group: input.reboot_group ?? before.reboot_group,
  };
  if (after.fleetlock_id === before.fleetlock_id && after.reboot_group === before.reboot_group) return current;
  if (after.fleetlock_id && after.fleetlock_id !== before.fleetlock_id) {
    unwrap(await coordinatorOf(env, current.record.fleet_id).reserveClientId(after.fleetlock_id, id));
  }
  const result = unwrap(await ledger.setRebootIdentity(after, { actor, details: { before, after: input } }));
  return result.view;
}

export async function putDesiredConfig(env: Env, actor: string, id: string, input: DesiredConfigInput) {
  return unwrap(await ledgerOf(env, id).putDesired(input, actor));
}
