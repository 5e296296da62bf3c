/**
 * D1 taps of the local entry (./index.ts), never of a deployment: statement counts (served at
 * /__local/d1-statements: the benchmark's and the tests' proof that an unchanged report costs no
 * D1 write, docs/design.md §8) and the rows each statement read and wrote (what D1 bills), per
 * sender (the Worker or one Durable Object), for the cost meter (./meter.ts), which hands each
 * sender its own handle on the binding (`d1RowsInto`).
 */

/** Statements sent through any sender's handle, by kind. */
export const d1Counters = { reads: 0, writes: 0 };

const WRITE = /^\s*(insert|update|delete|replace)\b/i;

function count(sql: string) {
  if (WRITE.test(sql)) d1Counters.writes++;
  else d1Counters.reads++;
}

export interface D1Rows {
  statements: number;
  rowsRead: number;
  rowsWritten: number;
}

/** Rows of statements sent through no sender's handle (a test's own statements, say). */
export const d1Unattributed: D1Rows = { statements: 0, rowsRead: 0, rowsWritten: 0 };

/** The sender of the statement being sent: set around each call, read synchronously by the tap. */
let sending: D1Rows | null = null;
let tapped = false;

/** Whether rows are being counted (false: the binding lacks the internal the tap needs). */
export const d1RowsMetered = () => tapped;

type Answer = { meta?: { rows_read?: number; rows_written?: number; size_after?: number } };

/** The database's size after the latest statement, bytes (each answer's meta.size_after). */
export const d1Stored = { bytes: 0 };

/**
 * The public API drops meta on raw() and first(), and drizzle reads through raw(); every method
 * and batch() goes through the binding's internal send (workerd's D1 shim:
 * `alwaysPrimarySession._send`), so the meter taps that. The sender is the handle whose statement
 * entered the send: the statement wrappers below set it around their call, and the send is
 * entered synchronously within that call.
 */
function tapRows(db: D1Database) {
  const session = (
    db as unknown as { alwaysPrimarySession?: { _send?: (...a: unknown[]) => Promise<Answer | Answer[]> } }
  ).alwaysPrimarySession;
  const send = session?._send;
  if (!session || typeof send !== "function" || (send as { tapped?: boolean }).tapped) return;
  const tap = function (this: unknown, ...args: unknown[]) {
    const rows = sending ?? d1Unattributed;
    const answer = send.apply(this, args);
    answer.then(
      (a) => {
        for (const one of Array.isArray(a) ? a : [a]) {
          rows.statements++;
          rows.rowsRead += one?.meta?.rows_read ?? 0;
          rows.rowsWritten += one?.meta?.rows_written ?? 0;
          if (typeof one?.meta?.size_after === "number") d1Stored.bytes = one.meta.size_after;
        }
      },
      () => {},
    );
    return answer;
  };
  session._send = Object.assign(tap, { tapped: true });
  tapped = true;
}

/** Calls `fn` with `rows` as the sender of whatever D1 send it enters synchronously. */
function sendingAs<T>(rows: D1Rows, fn: () => T): T {
  const previous = sending;
  sending = rows;
  try {
    return fn();
  } finally {
    sending = previous;
  }
}

const underlying = new WeakMap<object, { stmt: D1PreparedStatement; sql: string }>();

function wrapStatement(stmt: D1PreparedStatement, sql: string, rows: D1Rows): D1PreparedStatement {
  const proxy = new Proxy(stmt, {
    get(target, prop) {
      if (prop === "bind") {
        return (...args: unknown[]) => wrapStatement(target.bind(...args), sql, rows);
      }
      if (prop === "run" || prop === "all" || prop === "first" || prop === "raw") {
        const fn = (target as unknown as Record<string, (...a: unknown[]) => unknown>)[prop];
        return (...args: unknown[]) => {
          count(sql);
          return sendingAs(rows, () => fn.apply(target, args));
        };
      }
      const value = Reflect.get(target, prop, target);
      return typeof value === "function" ? value.bind(target) : value;
    },
  });
  underlying.set(proxy, { stmt, sql });
  return proxy;
}

const handles = new WeakMap<D1Database, WeakMap<D1Rows, D1Database>>();

/** A handle on `db` whose statements are counted, their rows added to `rows` (one per sender). */
export function d1RowsInto(db: D1Database, rows: D1Rows): D1Database {
  tapRows(db);
  let mine = handles.get(db);
  if (!mine) handles.set(db, (mine = new WeakMap()));
  let handle = mine.get(rows);
  if (!handle) {
    handle = new Proxy(db, {
      get(target, prop) {
        if (prop === "prepare") return (sql: string) => wrapStatement(target.prepare(sql), sql, rows);
        if (prop === "batch") {
          return (stmts: D1PreparedStatement[]) => {
            const raw = stmts.map((s) => {
              const known = underlying.get(s);
              count(known?.sql ?? "select");
              return known?.stmt ?? s;
            });
            return sendingAs(rows, () => target.batch(raw));
          };
        }
        const value = Reflect.get(target, prop, target);
        return typeof value === "function" ? value.bind(target) : value;
      },
    });
    mine.set(rows, handle);
  }
  return handle;
}
