/**
 * The kit's tables are created on the first write, not when an object wakes: an object that is
 * only ever probed (an unknown server id in a forged token, say) keeps an empty storage.
 */
export function kitTable(
  storage: DurableObjectStorage,
  name: string,
  ddl: string,
  /**
   * The object's commit hook (see Scheduler): a table created in a turn that rolls back is gone
   * again, so it is known to exist only once that turn committed; until then each `ensure`
   * sends its CREATE … IF NOT EXISTS again (nothing to create within the turn). Every object that
   * opens explicit transactions passes one (the ledger's and the rollout's stores): without it a
   * CREATE undone by a rollback is believed, and each later statement on the table fails until
   * the object restarts. Without it the table is believed at once, which holds only where no
   * write is ever undone (the coordinator: the runtime's implicit turn keeps writes on a throw).
   */
  onCommit?: (fn: () => void) => void,
) {
  let ready = false;
  const learn = () => {
    if (onCommit) onCommit(() => (ready = true));
    else ready = true;
  };
  return {
    /** Whether the table exists; reads of a missing table see nothing. */
    exists(): boolean {
      if (ready) return true;
      const found = probe(storage, name);
      if (found) learn();
      return found;
    },
    /** Before a write. */
    ensure() {
      if (!this.exists()) {
        storage.sql.exec(ddl);
        learn();
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
