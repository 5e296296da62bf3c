/**
 * A holder or a parked host as an operator names it (pure): by its FleetLock id, or by its
 * server — the server id, its hostname or `fleet/hostname` — which this coordinator maps to the
 * FleetLock id it holds under (the identity registry, src/fleetlock/identity.ts). The id is tried
 * first, so an id that looks like a hostname still means the id.
 */

/** What a refusal says was tried. */
export const TRIED = "tried as a FleetLock id, a server id and a hostname";

export function entryNamed<T extends { id: string; server_id: string | null }>(
  entries: readonly T[],
  ref: string,
  fleet: string,
  hostnameOf: (serverId: string) => string | undefined,
): T | null {
  const exact = entries.find((e) => e.id === ref);
  if (exact) return exact;
  const slash = ref.indexOf("/");
  if (slash >= 0 && ref.slice(0, slash) !== fleet) return null;
  const name = ref.slice(slash + 1).toLowerCase();
  return (
    (slash < 0 ? entries.find((e) => e.server_id === name) : undefined) ??
    entries.find((e) => e.server_id !== null && hostnameOf(e.server_id)?.toLowerCase() === name) ??
    null
  );
}
