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
  });
}
