/**
 * The ledger's parts: what its decision modules (./operator.ts, ./report.ts, ./planning.ts, …) are
 * handed, never the object itself, so no module calls back into it. Built once per object by
 * ./assemble.ts from the constructor's arguments; nothing is set on them afterwards.
 */
import type { DriftWatch } from "../fleetlock/ledger-side";
import type { Scheduler } from "../objects/kit/scheduler";
import type { LedgerOutbox } from "./effects";
import type { QuietWatch } from "./quiet";
import type { LedgerStore } from "./store";

export interface LedgerParts {
  store: LedgerStore;
  /** Everything the ledger writes outside itself (./effects.ts). */
  outbox: LedgerOutbox;
  /** The object's timers on its one alarm (./timers.ts). */
  scheduler: Scheduler;
  /** The clock the ledger decides with. */
  clock: () => number;
  /** Whether the host is connected on the channel now (./sockets.ts). */
  hostConnected: () => boolean;
  /** Whether the host's index row is leased: its socket or the quiet watch (./quiet.ts) watches it. */
  leased: () => boolean;
  quiet: QuietWatch;
  /** Whether the fleet wants drift-only health events (memory only, ../fleetlock/ledger-side.ts). */
  driftWatch: DriftWatch;
}
