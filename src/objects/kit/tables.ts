/**
 * The kit's tables are created on the first write, not when an object wakes: an object that is
 * only ever probed (an unknown server id in a forged token, say) keeps an empty storage.
 */
export function kitTable(storage: DurableObjectStorage, name: string, ddl: string) {
  let ready = false;
  return {
    /** Whether the table exists; reads of a missing table see nothing. */
    exists(): boolean {
      if (!ready) ready = probe(storage, name);
      return ready;
    },
    /** Before a write. */
    ensure() {
      if (!this.exists()) {
        storage.sql.exec(ddl);
        ready = true;
      }
    },
  };
}

/**
 * Whether the table exists, reading no row: asked once per wake of every object, and storage rows
 * read are billed (a look in sqlite_master reads each of its rows, 7 in a ledger). A statement on
 * a missing table fails as it is prepared, which touches neither storage nor a transaction.
 */
function probe(storage: DurableObjectStorage, name: string): boolean {
  try {
    storage.sql.exec(`SELECT 1 FROM ${name} LIMIT 0`).toArray();
    return true;
  } catch (err) {
    if (String(err).includes("no such table")) return false;
    throw err;
  }
}
