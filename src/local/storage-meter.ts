/**
 * Durable Object storage rows for the local cost meter (./meter.ts): SQLite-backed objects are
 * billed for the rows they read and write, as D1 is (since January 2026; scripts/bench/prices.ts).
 * Counted by wrapping the object's own storage handles in place, only in the local entry:
 * - SQL statements report their rows on their cursor (rowsRead / rowsWritten), final once the
 *   cursor is consumed, so cursors are kept and summed when `settle` runs (the meter calls it
 *   when the object has no call in flight, and before a reading);
 * - the synchronous KV API (ctx.storage.kv, kept in a hidden SQLite table) counts a row per key
 *   read, written or deleted;
 * - each setAlarm() is one row written (the Durable Objects pricing page, storage billing,
 *   footnote 3: "Each setAlarm() is billed as a single row written"), counted in alarmsSet too.
 * `settle` also records the object's stored bytes (sql.databaseSize: what "SQL Stored data" bills),
 * read inside the object, where its storage may be touched.
 * WebSocket attachments are not counted, nor the local runtime's own statements.
 */
export interface StorageRows {
  rowsRead: number;
  rowsWritten: number;
  alarmsSet: number;
  /** The object's database size when last settled, bytes. */
  storedBytes: number;
  /**
   * The same rows by statement (SQL text with its whitespace folded, or `kv get|put|delete|list`,
   * `setAlarm`): which statement a regression in rows read comes from.
   */
  byStatement: Map<string, StatementRows>;
}

interface StatementRows {
  calls: number;
  rowsRead: number;
  rowsWritten: number;
}

/** Adds one statement's rows to its line. */
function tally(rows: StorageRows, statement: string, read: number, written: number, calls = 1) {
  let line = rows.byStatement.get(statement);
  if (!line) rows.byStatement.set(statement, (line = { calls: 0, rowsRead: 0, rowsWritten: 0 }));
  line.calls += calls;
  line.rowsRead += read;
  line.rowsWritten += written;
  rows.rowsRead += read;
  rows.rowsWritten += written;
}

type Cursor = { rowsRead: number; rowsWritten: number };

const folded = (query: string) => query.replace(/\s+/g, " ").trim();

/** Wraps `storage` so its rows add to `rows`; returns `settle`, which folds in the cursors' rows. */
export function meterStorage(storage: DurableObjectStorage, rows: StorageRows): () => void {
  let cursors: { cursor: Cursor; query: string }[] = [];
  const sql = storage.sql;
  if (sql) {
    const exec = sql.exec.bind(sql);
    sql.exec = ((query: string, ...bindings: unknown[]) => {
      const cursor = exec(query, ...bindings);
      // The local runtime's own bookkeeping (miniflare records an object's name each time it
      // starts): no deployment runs it.
      if (!query.includes("__miniflare_")) cursors.push({ cursor, query });
      return cursor;
    }) as typeof sql.exec;
  }
  const kv = storage.kv;
  if (kv) {
    const {
      get,
      put,
      delete: del,
      list,
    } = { get: kv.get.bind(kv), put: kv.put.bind(kv), delete: kv.delete.bind(kv), list: kv.list.bind(kv) };
    kv.get = ((key: string) => {
      tally(rows, "kv get", 1, 0);
      return get(key);
    }) as typeof kv.get;
    kv.put = ((key: string, value: unknown) => {
      tally(rows, "kv put", 0, 1);
      return put(key, value);
    }) as typeof kv.put;
    kv.delete = ((key: string) => {
      tally(rows, "kv delete", 0, 1);
      return del(key);
    }) as typeof kv.delete;
    kv.list = ((options?: SyncKvListOptions) => {
      const listed = [...list(options)];
      tally(rows, "kv list", Math.max(1, listed.length), 0);
      return listed[Symbol.iterator]();
    }) as typeof kv.list;
  }
  if (typeof storage.setAlarm === "function") {
    const setAlarm = storage.setAlarm.bind(storage);
    storage.setAlarm = ((...args: Parameters<DurableObjectStorage["setAlarm"]>) => {
      tally(rows, "setAlarm", 0, 1);
      rows.alarmsSet++;
      return setAlarm(...args);
    }) as typeof storage.setAlarm;
  }
  return () => {
    for (const { cursor, query } of cursors) tally(rows, folded(query), cursor.rowsRead, cursor.rowsWritten);
    cursors = [];
    try {
      if (sql) rows.storedBytes = sql.databaseSize;
    } catch {
      // Read outside the object's own context (a reading between calls): the last size stands.
    }
  };
}
