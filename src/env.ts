import type { ServerLedger } from "./ledger/durable-object";
import type { RebootCoordinator } from "./fleetlock/durable-object";
import type { Rollout } from "./rollouts/durable-object";

export interface Env {
  DB: D1Database;
  LEDGER: DurableObjectNamespace<ServerLedger>;
  REBOOT: DurableObjectNamespace<RebootCoordinator>;
  ROLLOUT: DurableObjectNamespace<Rollout>;
  /** Bootstrap admin token (a secret; `.dev.vars` locally). */
  ADMIN_TOKEN?: string;
}
