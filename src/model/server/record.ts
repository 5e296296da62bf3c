import type { ServerKind, ServerState } from "../../domain/enums";
import type { AgentSpec } from "./schemas";

/** What a ledger knows of its server besides desired config and report. */
export interface ServerRecord {
  id: string;
  fleet_id: string;
  hostname: string;
  kind: ServerKind;
  roles: string[];
  /** Absent on records stored before servers had labels: none. */
  labels?: Record<string, string>;
  reboot_group: string;
  fleetlock_id: string | null;
  state: ServerState;
  stale_after_s: number;
  created_at: number;
  /** SHA-256 of the server's token; the ledger authenticates its own host. */
  token_hash: string;
  token_id: string;
  /**
   * When the token was revoked (ms), while it stays revoked: the ledger owns the fact, and its
   * D1 row is a copy that may lag. Absent while the token works, and on a record revoked by older
   * code.
   */
  token_revoked_at?: number;
}

/** The desired config a ledger keeps: what its host is told to run, and at which generation. */
export interface DesiredState {
  generation: number;
  agents: AgentSpec[];
  lifecycle: "run" | "terminate" | "uninstall";
  updated_at: number;
}
