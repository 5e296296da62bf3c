import { resumeCleanup } from "./decommission";
import { project, type ReleasePayload } from "./effects";
import type { LedgerParts } from "./parts";

/**
 * When the ledger wakes, before any call reads it: storage written by older code is brought to
 * this code's format (throwing, storage untouched, on a newer one), and what older formats kept
 * outside the outbox moves into it. Looked at first, written only when there is something to
 * move: nearly every wake has nothing, and opens no transaction (on a ledger just opened, an empty
 * one was a tenth of the runtime's CPU a wake of ours costs).
 */
export function openLedger(d: LedgerParts) {
  const upgraded = d.store.open();
  const record = d.store.load()?.record;
  if (!record) return;
  // Its few timers in one read: the quiet watch's (asked below) and the earliest (the alarm's, next).
  d.scheduler.preload();
  const legacy = d.store.legacyRelease<Omit<ReleasePayload, "server_id">>();
  const cleanup = upgraded !== null && upgraded.from < 3;
  // The index learns of what the upgrade changed through the projection.
  const reproject = upgraded?.changed === true || orphanedLease(d);
  if (legacy === undefined && !cleanup && !reproject) return;
  d.store.transaction(() => {
    if (legacy !== undefined) {
      d.store.dropLegacyRelease();
      d.outbox.enqueue("release", { ...legacy, server_id: record.id } satisfies ReleasePayload, { key: "release" });
    }
    if (cleanup) resumeCleanup(d);
    if (reproject) project(d.outbox);
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
