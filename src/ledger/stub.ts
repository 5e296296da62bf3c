import type { Env } from "../env";
import { ApiError } from "../http/errors";
import type { LedgerFailure } from "./durable-object";

/** The ledger of one server; its Durable Object id derives from the server id. */
export const ledgerOf = (env: Env, serverId: string) => env.LEDGER.get(env.LEDGER.idFromName(serverId));

/** Ledger RPCs report client mistakes as values (errors crossing RPC lose their shape). */
export function unwrap<T extends { ok: true }>(result: T | LedgerFailure): T {
  if (!result.ok) throw new ApiError(result.status, result.code, result.message, result.details);
  return result;
}
