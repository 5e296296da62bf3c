/**
 * A host's own calls (/v1/agent/*), answered by its server's ledger alone: the ledger checks the
 * token's digest, so the hot path (desired polls, reports) never reads D1.
 */
import type { Env } from "../env";
import type { InventoryReport } from "../ledger/schemas";
import { unwrap } from "../objects/kit/result";
import { ledgerOf } from "../objects/stubs";

/** The desired config; with `heldGeneration` current, parks up to `waitMs` for a new one. */
export async function desiredForHost(env: Env, host: { serverId: string; tokenHash: string }, heldGeneration: number | null, waitMs: number) {
  return unwrap(await ledgerOf(env, host.serverId).agentDesired(host.tokenHash, heldGeneration, waitMs));
}

/** Stores what the host reports it runs; answers the status computed from it. */
export async function reportFromHost(env: Env, host: { serverId: string; tokenHash: string }, report: InventoryReport) {
  return unwrap(await ledgerOf(env, host.serverId).agentReport(host.tokenHash, report));
}
