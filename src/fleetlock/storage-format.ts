/**
 * The format of a RebootCoordinator's own storage (the keys of ./store.ts): the coordinator
 * counterpart of the ledger's and the rollout's storage-format.ts. Storage written before the format
 * was recorded is format 1; an empty object is stamped by its first write (./store.ts), so probing
 * a fleet that has no coordinator state writes nothing. Storage stamped by newer code is refused
 * rather than guessed at.
 *
 * There is one format so far, so no steps. A later layout bumps COORDINATOR_FORMAT and adds a
 * step here, in the style of the ledger's (keys named literally, idempotent), applied by
 * `openCoordinatorFormat` before any call reads the storage.
 */

/** The format this code writes. */
export const COORDINATOR_FORMAT = 1;
export const FORMAT_KEY = "format";

/**
 * Reads the format stamp before anything else: whether it is this code's (false: unstamped
 * storage, format 1, stamped on its first write). Throws on storage from newer code.
 */
export function openCoordinatorFormat(kv: SyncKvStorage): boolean {
  const stamped = kv.get<number>(FORMAT_KEY);
  if (stamped === undefined) return false;
  if (stamped > COORDINATOR_FORMAT) {
    throw new Error(
      `coordinator storage is in format ${stamped}, newer than this code's ${COORDINATOR_FORMAT}; refusing to read it`,
    );
  }
  return stamped === COORDINATOR_FORMAT;
}
