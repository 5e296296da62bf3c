/**
 * The fleet's names that must stay unique, held by this coordinator (one per fleet, so racing
 * writers are serialized here): hostnames (among the fleet's live servers) and the expiry of
 * fleetlock_id reservations (./identity.ts keeps the ids themselves).
 *
 * A name is reserved for a registration (or a PATCH) before its ledger commits. A reservation
 * ends in one of two ways, never by time alone: at its end (or when another writer wants the
 * name after it) this object asks the server's ledger whether it holds the name. A ledger that
 * committed keeps it (its hostname is then held until the server is removed; its id is taken
 * as if its identity had been delivered); a workflow that died before its commit leaves nothing,
 * and the name is free. The ledger refuses a commit later than the reservation's end less
 * RESERVATION_MARGIN_MS (src/ledger/operator.ts), so no commit can follow the question.
 *
 * Real time (Date.now) throughout: the expiry is a scheduler timer, and timers run on real time.
 */
import { fail, type Failure } from "../objects/kit/result";
import type { Coordination } from "./context";
import { KEY, type HeldNames } from "./store";

/** How long a reserved name waits for its ledger before the ledger is asked. */
export const RESERVATION_TTL_MS = 2 * 60_000;

/** How the coordinator asks a server's ledger what it holds (a read: no effect leaves). */
export type AskLedger = (serverId: string) => Promise<HeldNames | null>;

/**
 * Holds `hostname` for the registration of `serverId`. Refused (hostname_taken) while another
 * server holds it or a reservation for another one stands.
 */
export async function reserveHostname(c: Coordination, ask: AskLedger, hostname: string, serverId: string): Promise<{ ok: true; until: number } | Failure> {
  const name = hostname.toLowerCase();
  const before = c.store.hostnames.get(name);
  // Past its end but not settled yet: whether its server committed decides, not the clock.
  if (before && before.server_id !== serverId && before.until !== null && before.until <= Date.now()) {
    await settleHostname(c, ask, name, before.until);
  }
  const claim = c.store.hostnames.get(name);
  if (claim && claim.server_id !== serverId) {
    return fail("hostname_taken", `another server of this fleet (${claim.server_id}) is named '${name}'${claim.until === null ? "" : " (being registered)"}`, {
      server_id: claim.server_id,
    });
  }
  const until = Date.now() + RESERVATION_TTL_MS;
  c.store.hostnames.put(name, { server_id: serverId, until });
  c.scheduler.schedule(KEY.hostname(name), until, { until });
  await c.scheduler.arm();
  return { ok: true, until };
}

/** The timer of a reserved hostname (or a writer that found it past its end): ask the ledger. */
export async function settleHostname(c: Coordination, ask: AskLedger, name: string, until: number) {
  const claim = c.store.hostnames.get(name);
  if (!claim || claim.until !== until) return;
  const held = await ask(claim.server_id);
  // Anything may have changed while the ledger answered.
  const now = c.store.hostnames.get(name);
  if (!now || now.until !== until || now.server_id !== claim.server_id) return;
  if (held?.live && held.identity.hostname === name) c.store.hostnames.put(name, { server_id: claim.server_id, until: null });
  else c.store.hostnames.delete(name);
  c.scheduler.cancel(KEY.hostname(name));
}

/** The server was removed (its ledger's cleanup): its hostname is free again. Idempotent. */
export function releaseHostname(c: Coordination, serverId: string, hostname: string) {
  const name = hostname.toLowerCase();
  if (c.store.hostnames.get(name)?.server_id !== serverId) return;
  c.store.hostnames.delete(name);
  c.scheduler.cancel(KEY.hostname(name));
}
