import type { Env } from "../env";

/** The ledger of one server; its Durable Object id derives from the server id. */
export const ledgerOf = (env: Env, serverId: string) => env.LEDGER.get(env.LEDGER.idFromName(serverId));
