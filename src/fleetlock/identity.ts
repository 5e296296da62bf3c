/**
 * The FleetLock identity registry: which server each fleetlock_id belongs to, and the ids held
 * for a registration or a PATCH until the server's ledger confirms them. This coordinator is where
 * fleetlock_id uniqueness lives. Identities arrive from the ledgers' outboxes, so the host path
 * never reads D1.
 *
 * Reservations run on real time (`scheduler.now()`), not the coordinator's decision clock: their end is
 * a scheduler timer, and the timer runs on real time; how a reservation ends: ./names.ts.
 */
import type { ServerIdentity } from "../model/fleet";
import { fail, type Failure } from "../objects/kit/result";
import { audit } from "./effects";
import type { CoordinatorParts } from "./parts";
import { failure, type FleetLockFailure } from "./protocol";
import { renameHolder } from "./semaphore";
import { askClaimant } from "./claims";
import { KEY, type AskLedger, type ClientEntry, type CoordinatorStore, type FleetConfig } from "./store";

/** How long a reserved name (an id, a hostname: ./names.ts) waits for its ledger before the ledger is asked. */
export const RESERVATION_TTL_MS = 2 * 60_000;

/**
 * The registry entry for an id. Only ids no server has registered are refused, unless the fleet
 * allows unknown ids.
 */
export function clientOf(
  store: CoordinatorStore,
  config: FleetConfig,
  id: string,
  /** The id's entry when the caller has just read it. */
  known?: ClientEntry,
): { ok: true; entry: ClientEntry | null } | FleetLockFailure {
  const entry = known ?? store.clients.get(id) ?? null;
  if (entry || config.allow_unknown_ids) return { ok: true, entry };
  return failure("unknown_client", `no server of this fleet is registered with fleetlock_id '${id}'`);
}

/**
 * Holds `fleetlockId` for `serverId` until its ledger confirms it (`setIdentity`) or, at the
 * reservation's end, the ledger is asked whether it committed it (./names.ts). Refused while
 * another server has the id, registered or reserved.
 */
export async function reserve(
  c: CoordinatorParts,
  ask: AskLedger,
  fleetlockId: string,
  serverId: string,
): Promise<{ ok: true; until: number | null } | Failure> {
  await settlePast(c, ask, fleetlockId, serverId);
  const taken = clientIdTaken(c.store, fleetlockId, serverId);
  if (taken) return taken;
  const until = holdClientId(c, fleetlockId, serverId);
  await c.scheduler.arm();
  return { ok: true, until };
}

/** Another server's reservation past its end but not settled yet: its ledger decides, not the clock. */
export async function settlePast(c: CoordinatorParts, ask: AskLedger, fleetlockId: string, serverId: string) {
  const before = c.store.reservations.get(fleetlockId);
  if (before && before.server_id !== serverId && before.until <= c.scheduler.now())
    await settleReservation(c, ask, fleetlockId, before.until);
}

/** Whether another server has the id, registered or reserved (synchronous). */
export function clientIdTaken(store: CoordinatorStore, fleetlockId: string, serverId: string): Failure | null {
  const owner = store.clients.get(fleetlockId);
  const reserved = store.reservations.get(fleetlockId);
  const taken = (owner && owner.server_id !== serverId) || (reserved && reserved.server_id !== serverId);
  return taken ? fail("fleetlock_id_taken", `another server of this fleet uses fleetlock_id '${fleetlockId}'`) : null;
}

/** Reserves a free id (synchronous; the caller arms the alarm): its end, or null if the server already has it. */
export function holdClientId(c: CoordinatorParts, fleetlockId: string, serverId: string): number | null {
  if (c.store.clients.get(fleetlockId)) return null;
  const until = c.scheduler.now() + RESERVATION_TTL_MS;
  c.store.reservations.put(fleetlockId, { server_id: serverId, until });
  c.scheduler.schedule(KEY.reservation(fleetlockId), until, { until });
  return until;
}

/**
 * A reservation's end: the server's ledger is asked. If it holds the id, its identity is taken
 * as if its outbox had delivered it (an outbox that has not, after a crash, cannot lose the id
 * to another server); otherwise the id is free again.
 */
export async function settleReservation(c: CoordinatorParts, ask: AskLedger, fleetlockId: string, until: number) {
  const asked = await askClaimant(c.store.reservations, ask, fleetlockId, until);
  if (asked.stale) return;
  const { held, serverId } = asked;
  if (
    held?.live &&
    held.identity.fleetlock_id === fleetlockId &&
    (await setIdentity(c, serverId, held.identity)).applied
  )
    return;
  c.store.reservations.delete(fleetlockId);
  c.scheduler.cancel(KEY.reservation(fleetlockId));
}

/**
 * A host asks under an id nobody holds yet but a server has reserved: its ledger may have
 * committed the id and its outbox not delivered it yet (after a crash, until its alarm runs).
 * The ledger is asked, and what it holds is taken, so an acknowledged id works at once. A ledger
 * that cannot be reached now changes nothing: the host is answered as before, and the ledger's
 * outbox (or the reservation's timer) brings the id later.
 */
export async function catchUpReserved(c: CoordinatorParts, ask: AskLedger, fleetlockId: string) {
  if (c.store.clients.get(fleetlockId)) return;
  const r = c.store.reservations.get(fleetlockId);
  if (!r) return;
  const held = await ask(r.server_id).catch((err) => {
    console.error(
      JSON.stringify({
        msg: "reserving ledger not reached; the id waits for its delivery",
        id: fleetlockId,
        error: String(err),
      }),
    );
    return null;
  });
  if (held?.live && held.identity.fleetlock_id === fleetlockId) await setIdentity(c, r.server_id, held.identity);
}

/**
 * Records (or replaces) a server's identity, delivered from its ledger's outbox; older revisions
 * are ignored, so redeliveries and reordered deliveries change nothing. An id that another server
 * registered meanwhile stays with that server (audited as a conflict).
 */
export async function setIdentity(
  c: CoordinatorParts,
  serverId: string,
  identity: ServerIdentity,
): Promise<{ applied: boolean; conflict?: boolean }> {
  const { store } = c;
  const id = identity.fleetlock_id;
  const owner = id ? store.clients.get(id) : undefined;
  const previous = store.servers.get(serverId);
  if (id && owner && owner.server_id !== serverId && !(previous && previous.rev >= identity.rev)) {
    await audit(
      c,
      [
        {
          actor: `server:${serverId}`,
          action: "fleetlock.identity_conflict",
          target: `server:${serverId}`,
          details: { fleetlock_id: id, held_by: owner.server_id },
        },
      ],
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
export function adoptIdentity(c: CoordinatorParts, serverId: string, identity: ServerIdentity): { applied: boolean } {
  if (c.store.servers.get(serverId)) return { applied: false };
  const id = identity.fleetlock_id;
  if (!id || c.store.clients.get(id)) return { applied: false };
  return { applied: apply(c, serverId, { ...identity, rev: -1 }) };
}

function apply(c: CoordinatorParts, serverId: string, identity: ServerIdentity): boolean {
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
      store.saveGroup(heldIn, renameHolder(store.group(heldIn)!, oldId, identity.fleetlock_id, c.scheduler.now()));
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
