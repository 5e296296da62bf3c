/**
 * Versioned storage for the per-server ledger: the ledger counterpart of the D1 upgrade steps.
 * Each ledger records the format its storage is in and, when it loads, applies the point-to-point
 * steps from there to the newest before any call reads it (src/ledger/store.ts, which also
 * refuses to read a ledger in any other format). Ledgers written before formats were recorded are
 * format 1.
 *
 * Steps name storage keys literally, as they were in the format they read: a later rename of a
 * key in the ledger must not change what an old step does. Like D1 steps, they are idempotent and
 * conditional, because a ledger registered by code older than format 3 is unstamped until its
 * first reload and so meets every step once.
 */

/** The format this code writes (ledgers are stamped with it when created and when upgraded). */
export const LEDGER_FORMAT = 3;
export const FORMAT_KEY = "format";

export interface FormatStep {
  /** The format this step produces from the one before it. */
  to: number;
  description: string;
  /** Returns whether it changed anything the D1 projection shows. */
  apply(kv: SyncKvStorage): boolean;
}

interface RecordV1 {
  state: string;
}

const FORMAT_STEPS: readonly FormatStep[] = [
  {
    to: 2,
    description:
      "A ledger that holds a report is never provisioning: format 1 ledgers (the foundation release) " +
      "kept a reporting host provisioning, and one that has since gone silent would stay so for good",
    apply(kv) {
      const record = kv.get<RecordV1>("record");
      if (!record || record.state !== "provisioning" || kv.get("report") === undefined) return false;
      kv.put("record", { ...record, state: "active" });
      return true;
    },
  },
  {
    to: 3,
    description:
      "Decommission cleanup steps are outbox effects, no longer run from a `cleanup` timer: a cleanup under " +
      "way continues from its first step not done. That needs the outbox, so the ledger does it when it " +
      "opens storage upgraded from before this format (src/ledger/decommission.ts resumeCleanup); the " +
      "old timer, left without a handler, is dropped when it fires",
    apply: () => false,
  },
];

export type FormatUpgrade = { from: number; to: number; changed: boolean };

/**
 * Brings the storage to `newest` in one synchronous transaction, steps and stamp together. An
 * empty ledger (no server registered) is left untouched, so probing an unknown id writes nothing.
 * Storage from newer code is refused rather than guessed at.
 */
export function upgradeLedgerStorage(
  storage: DurableObjectStorage,
  steps: readonly FormatStep[] = FORMAT_STEPS,
  newest = LEDGER_FORMAT,
): FormatUpgrade | null {
  const kv = storage.kv;
  const stamped = kv.get<number>(FORMAT_KEY);
  if (stamped === newest) return null;
  if (stamped === undefined && kv.get("record") === undefined) return null;
  const from = stamped ?? 1;
  if (from > newest) {
    throw new Error(`ledger storage is in format ${from}, newer than this code's ${newest}; refusing to read it`);
  }
  return storage.transactionSync(() => {
    let changed = false;
    for (const step of steps) {
      if (step.to > from && step.to <= newest) changed = step.apply(kv) || changed;
    }
    kv.put(FORMAT_KEY, newest);
    return { from, to: newest, changed };
  });
}
