/**
 * The FleetLock identity registry: which server each fleetlock_id belongs to, and the ids held
 * for a registration or a PATCH until the server's ledger confirms them. This coordinator is where
 * fleetlock_id uniqueness lives. Identities arrive from the ledgers' outboxes, so the host path
 * never reads D1.
 *
 * Reservations run on real time (Date.now), not the coordinator's decision clock: their expiry is
 * a scheduler timer, and the timer runs on real time.
 */
import { fail, type Failure } from "../objects/kit/result";
import type { Scheduler } from "../objects/kit/scheduler";
import type { Coordination } from "./context";
import { failure, type FleetLockFailure } from "./protocol";
import { renameHolder } from "./semaphore";
import { KEY, type ClientEntry, type CoordinatorStore, type FleetConfig, type ServerIdentity } from "./store";

/**
 * How long a reserved fleetlock_id waits for its ledger's confirmation. A workflow that died
 * between reserving and committing leaves nothing taken for longer than this.
 */
export const RESERVATION_TTL_MS = 2 * 60_000;

/**
 * The registry entry for an id. Only ids no server has registered are refused, unless the fleet
 * allows unknown ids.
 */
export function clientOf(store: CoordinatorStore, config: FleetConfig, id: string): { ok: true; entry: ClientEntry | null } | FleetLockFailure {
  const entry = store.clients.get(id) ?? null;
  if (entry || config.allow_unknown_ids) return { ok: true, entry };
  return failure("unknown_client", `no server of this fleet is registered with fleetlock_id '${id}'`);
}

/**
 * Holds `fleetlockId` for `serverId` until its ledger confirms it (`setIdentity`) or the
 * reservation expires. Refused while another server has the id, registered or reserved.
 */
export async function reserve(store: CoordinatorStore, scheduler: Scheduler, fleetlockId: string, serverId: string): Promise<{ ok: true } | Failure> {
  const owner = store.clients.get(fleetlockId);
  const now = Date.now();
  const reserved = store.reservations.get(fleetlockId);
  const taken = (owner && owner.server_id !== serverId) || (reserved && reserved.server_id !== serverId && reserved.until > now);
  if (taken) return fail("fleetlock_id_taken", `another server of this fleet uses fleetlock_id '${fleetlockId}'`);
  if (!owner) {
    const until = now + RESERVATION_TTL_MS;
    store.reservations.put(fleetlockId, { server_id: serverId, until });
    scheduler.schedule(KEY.reservation(fleetlockId), until, { until });
    await scheduler.arm();
  }
  return { ok: true };
}

/** The timer carries the reservation it was set for: a later reservation of the id outlives it. */
export function expireReservation(store: CoordinatorStore, fleetlockId: string, until: number) {
  const r = store.reservations.get(fleetlockId);
  if (r && r.until <= until) store.reservations.delete(fleetlockId);
}

/**
 * Records (or replaces) a server's identity, delivered from its ledger's outbox; older revisions
 * are ignored, so redeliveries and reordered deliveries change nothing. An id that another server
 * registered meanwhile stays with that server (audited as a conflict).
 */
export async function setIdentity(c: Coordination, serverId: string, identity: ServerIdentity): Promise<{ applied: boolean; conflict?: boolean }> {
  const { store, effects } = c;
  const id = identity.fleetlock_id;
  const owner = id ? store.clients.get(id) : undefined;
  const previous = store.servers.get(serverId);
  if (id && owner && owner.server_id !== serverId && !(previous && previous.rev >= identity.rev)) {
    await effects.audit(
      [{
        actor: `server:${serverId}`,
        action: "fleetlock.identity_conflict",
        target: `server:${serverId}`,
        details: { fleetlock_id: id, held_by: owner.server_id },
      }],
      { wait: false },
    );
    return { applied: false, conflict: true };
  }
  return { applied: apply(c, serverId, identity) };
}

/**
 * An identity read from the index by an upgrade step: taken only if this coordinator knows
 * nothing of the server and nobody else has the id, so it never overrides a ledger's delivery.
 */
export function adoptIdentity(c: Coordination, serverId: string, identity: ServerIdentity): { applied: boolean } {
  if (c.store.servers.get(serverId)) return { applied: false };
  const id = identity.fleetlock_id;
  if (!id || c.store.clients.get(id)) return { applied: false };
  return { applied: apply(c, serverId, { ...identity, rev: -1 }) };
}

function apply(c: Coordination, serverId: string, identity: ServerIdentity): boolean {
  const { store, scheduler } = c;
  const previous = store.servers.get(serverId);
  if (previous && previous.rev > identity.rev) return false;
  const oldId = previous?.fleetlock_id ?? null;
  if (oldId && oldId !== identity.fleetlock_id) {
    if (store.clients.get(oldId)?.server_id === serverId) {
      store.clients.delete(oldId);
      // A host parked under the old id (the server was removed, or its id changed) is never
      // granted: it leaves every queue now, and its waiting call is answered unknown_client.
      c.parked.forget(oldId);
    }
    // Removed: it is no longer a server that rebooted and must still report healthy.
    if (identity.fleetlock_id === null) c.gateStore.dropRecovering(serverId);
    // The slot follows the server to its new id, so the new id's steady-state releases it.
    const heldIn = store.heldIn(oldId);
    if (heldIn && identity.fleetlock_id) {
      store.saveGroup(heldIn, renameHolder(store.group(heldIn)!, oldId, identity.fleetlock_id, Date.now()));
    }
  }
  if (identity.fleetlock_id) {
    // Confirmed: the reservation that guarded the id until now is no longer needed.
    store.reservations.delete(identity.fleetlock_id);
    scheduler.cancel(KEY.reservation(identity.fleetlock_id));
    store.clients.put(identity.fleetlock_id, {
      server_id: serverId,
      hostname: identity.hostname,
      reboot_group: identity.reboot_group,
    });
  }
  store.servers.put(serverId, identity);
  return true;
}
