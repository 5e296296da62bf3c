/**
 * The kit's tables are created on the first write, not when an object wakes: an object that is
 * only ever probed (an unknown server id in a forged token, say) keeps an empty storage.
 */
export function kitTable(storage: DurableObjectStorage, name: string, ddl: string) {
  let ready = false;
  return {
    /** Whether the table exists; reads of a missing table see nothing. */
    exists(): boolean {
      if (!ready) {
        ready =
          storage.sql.exec("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", name).toArray().length > 0;
      }
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
