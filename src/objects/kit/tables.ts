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
   * sends its CREATE … IF NOT EXISTS again (nothing to create within the turn), and each `read` or
   * `write` is tried as it is, a missing table told by its failure. Every object that
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
  /** `fn` on the table, or `missing()` when it failed for want of the table (which it then did not touch). */
  const attempt = <T>(fn: () => T, missing: () => T): T => {
    if (ready) return fn();
    let out: T;
    try {
      out = fn();
    } catch (err) {
      if (!isMissing(err)) throw err;
      return missing();
    }
    learn();
    return out;
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
    /**
     * A read of the table: what `fn` answers, or `missing` while there is no table. Not known yet
     * (the first read of a wake), the read itself tells: on a missing table it fails as it is
     * prepared, as the probe would, so it takes no probe of its own (one statement, not two).
     */
    read<T>(fn: () => T, missing: T): T {
      return attempt(fn, () => missing);
    },
    /**
     * A write to the table, created first if missing. Not known yet, the write is tried as it is
     * (the table nearly always exists on a wake) and the table created only when it fails as
     * prepared, which wrote nothing: no probe before the first write of a wake.
     */
    write<T>(fn: () => T): T {
      return attempt(fn, () => {
        storage.sql.exec(ddl);
        learn();
        return fn();
      });
    },
  };
}

const isMissing = (err: unknown) => String(err).includes("no such table");

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
    if (isMissing(err)) return false;
    throw err;
  }
}
