/**
 * The fleet's names that must stay unique, held by this coordinator (one per fleet, so racing
 * writers are serialized here): hostnames (among the fleet's live servers) and, with
 * ./identity.ts, fleetlock_ids. A registration reserves both in one turn, or neither.
 *
 * A name is reserved for a registration (or a PATCH) before its ledger commits. A reservation
 * ends in one of two ways, never by time alone: at its end (or when another writer wants the
 * name after it) this object asks the server's ledger whether it holds the name. A ledger that
 * committed keeps it (its hostname is then held until the server is removed; its id is taken
 * as if its identity had been delivered); a workflow that died before its commit leaves nothing,
 * and the name is free. The ledger refuses a commit later than the reservation's end less
 * RESERVATION_MARGIN_MS (src/ledger/operator.ts), so no commit can follow the question.
 *
 * Real time (`scheduler.now()`) throughout: the expiry is a scheduler timer, and timers run on real time.
 */
import { askClaimant } from "./claims";
import { fail, type Failure } from "../objects/kit/result";
import type { CoordinatorParts } from "./parts";
import { clientIdTaken, holdClientId, RESERVATION_TTL_MS, settlePast } from "./identity";
import { KEY, type AskLedger, type CoordinatorStore } from "./store";

/**
 * A registration's names, both or neither: its hostname and, if it has one, its fleetlock_id.
 * Refused (hostname_taken, fleetlock_id_taken) while another server holds either or a
 * reservation for another one stands; a refusal reserves nothing, so the request corrected and
 * sent again is not blocked by its own earlier attempt. `until`: the earliest reservation's end.
 */
export async function reserveRegistration(
  c: CoordinatorParts,
  ask: AskLedger,
  hostname: string,
  fleetlockId: string | null,
  serverId: string,
): Promise<{ ok: true; until: number } | Failure> {
  const name = hostname.toLowerCase();
  // Past their end but not settled yet: whether their server committed decides, not the clock.
  const before = c.store.hostnames.get(name);
  if (before && before.server_id !== serverId && before.until !== null && before.until <= c.scheduler.now()) {
    await settleHostname(c, ask, name, before.until);
  }
  if (fleetlockId) await settlePast(c, ask, fleetlockId, serverId);
  // From here no await until both are held: one turn decides both, and a deletion's seal (set
  // while the awaits above let other calls in) is seen in the same turn.
  const sealed = c.store.sealedUntil;
  if (sealed !== null && sealed > c.scheduler.now()) {
    return fail("fleet_removal_pending", "the fleet is being deleted: no server can be registered in it");
  }
  const refused =
    hostnameTaken(c.store, name, serverId) ?? (fleetlockId ? clientIdTaken(c.store, fleetlockId, serverId) : null);
  if (refused) return refused;
  const until = c.scheduler.now() + RESERVATION_TTL_MS;
  c.store.hostnames.put(name, { server_id: serverId, until });
  c.scheduler.schedule(KEY.hostname(name), until, { until });
  const idUntil = fleetlockId ? holdClientId(c, fleetlockId, serverId) : null;
  await c.scheduler.arm();
  return { ok: true, until: Math.min(until, idUntil ?? Infinity) };
}

function hostnameTaken(store: CoordinatorStore, name: string, serverId: string): Failure | null {
  const claim = store.hostnames.get(name);
  if (!claim || claim.server_id === serverId) return null;
  return fail(
    "hostname_taken",
    `another server of this fleet (${claim.server_id}) is named '${name}'${claim.until === null ? "" : " (being registered)"}`,
    {
      server_id: claim.server_id,
    },
  );
}

/** The timer of a reserved hostname (or a writer that found it past its end): ask the ledger. */
export async function settleHostname(c: CoordinatorParts, ask: AskLedger, name: string, until: number) {
  const asked = await askClaimant(c.store.hostnames, ask, name, until);
  if (asked.stale) return;
  if (asked.held?.live && asked.held.identity.hostname === name)
    c.store.hostnames.put(name, { server_id: asked.serverId, until: null });
  else c.store.hostnames.delete(name);
  c.scheduler.cancel(KEY.hostname(name));
}

/** The server was removed (its ledger's cleanup): its hostname is free again. Idempotent. */
export function releaseHostname(c: CoordinatorParts, serverId: string, hostname: string) {
  const name = hostname.toLowerCase();
  if (c.store.hostnames.get(name)?.server_id !== serverId) return;
  c.store.hostnames.delete(name);
  c.scheduler.cancel(KEY.hostname(name));
}

/**
 * A fleet's deletion, once D1 shows no live server: refused while a registration is in flight (its
 * server is in no index yet), else registrations are kept out until the deletion wipes this object.
 * A deletion that dies before that leaves the seal to end by itself, a reservation's time later.
 */
export function sealForDeletion(c: CoordinatorParts): { ok: true } | Failure {
  if (c.store.hasReservedHostname()) {
    return fail(
      "fleet_not_empty",
      "a server is being registered in this fleet; retry once it is registered (or its registration failed)",
    );
  }
  c.store.sealedUntil = c.scheduler.now() + RESERVATION_TTL_MS;
  return { ok: true };
}

/** The deletion was refused after all: registrations are welcome again. */
export function unseal(c: CoordinatorParts) {
  if (c.store.sealedUntil !== null) c.store.sealedUntil = null;
}
