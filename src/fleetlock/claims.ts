/**
 * How a reservation (a fleetlock_id's, a hostname's) ends: its server's ledger is asked what it
 * holds. The answer counts only if the claim is still the one asked about: anything may have
 * changed at the coordinator while the ledger answered.
 */
import type { AskLedger, HeldNames } from "./store";

interface Claims {
  get(name: string): { server_id: string; until: number | null } | undefined;
}

/** What the claiming server's ledger holds, or `stale` when the claim ending at `until` is gone or changed. */
export async function askClaimant(
  claims: Claims,
  ask: AskLedger,
  name: string,
  until: number,
): Promise<{ stale: true } | { stale: false; serverId: string; held: HeldNames | null }> {
  const claim = claims.get(name);
  if (!claim || claim.until !== until) return { stale: true };
  const held = await ask(claim.server_id);
  const now = claims.get(name);
  if (!now || now.until !== until || now.server_id !== claim.server_id) return { stale: true };
  return { stale: false, serverId: claim.server_id, held };
}
