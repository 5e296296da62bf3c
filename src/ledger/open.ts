import { resumeCleanup } from "./decommission";
import { project, type ReleasePayload } from "./effects";
import type { LedgerParts } from "./parts";

/**
 * When the ledger wakes, before any call reads it: storage written by older code is brought to
 * this code's format (throwing, storage untouched, on a newer one), and what older formats kept
 * outside the outbox moves into it.
 */
export function openLedger(d: LedgerParts) {
  const upgraded = d.store.open();
  const record = d.store.load()?.record;
  if (!record) return;
  d.store.transaction(() => {
    const legacy = d.store.takeLegacyRelease<Omit<ReleasePayload, "server_id">>();
    if (legacy)
      d.outbox.enqueue("release", { ...legacy, server_id: record.id } satisfies ReleasePayload, { key: "release" });
    if (upgraded && upgraded.from < 3) resumeCleanup(d);
    // The index learns of what the upgrade changed through the projection.
    if (upgraded?.changed) project(d.outbox);
    if (orphanedLease(d)) project(d.outbox);
  });
}

/**
 * The index was last told that the host is watched (its stale_at leased, ./projection.ts), yet the
 * ledger wakes with no host socket and no quiet watch: a reset (a deploy, a crash) dropped its
 * sockets without a close. The index gets the exact stale_at now, not at the lease's end. Read
 * only when nothing watches, so a connected host's wake for its report costs no row for it.
 */
function orphanedLease(d: LedgerParts) {
  return !d.leased() && d.store.projected()?.leased === true;
}
