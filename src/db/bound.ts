/**
 * An UPDATE whose SQL text is built once per shape (table, the columns it sets and matches, what it
 * returns) and whose values are bound at each use, for a D1 batch beside drizzle's own queries.
 * Drizzle builds a query's text anew at every use (its builder walks the table's columns and each
 * chunk of the SQL), which a profile of the changed report measured at 100-150 µs of the ledger's
 * delivery for its two UPDATEs; the text of a shape seen before is a map lookup.
 *
 * The item goes through `db.batch` as drizzle's own do: the batch asks each item for its prepared
 * query (`_prepare`: its text, bound values and D1 statement) and maps each answer with it. That is
 * drizzle's batch protocol, not a public type, so it is pinned by the projection's tests, which run
 * these statements through a real batch and read the rows back.
 */
import { getTableName, is, sql, SQL, type Column, type Table } from "drizzle-orm";
import type { BatchItem } from "drizzle-orm/batch";
import type { Db } from "./client";

/** A column's value as D1 stores it (a JSON column's text), as drizzle's own Param would bind it. */
function driverValue(column: Column, value: unknown): unknown {
  if (value === null) return null;
  if (is(value, SQL)) throw new Error("a bound UPDATE binds values, not SQL");
  return column.mapToDriverValue(value);
}

const texts = new Map<string, string>();

/** A quoted identifier, as drizzle's SQLite dialect writes it. */
const quoted = (name: string) => `"${name.replace(/"/g, '""')}"`;

/**
 * What a bound UPDATE returns besides its write: one expression under a name (`RETURNING (…) AS
 * "name"`), its text fixed and its values bound after the UPDATE's own. The batch answers it as
 * the rows D1 returned, by that name.
 */
export interface BoundReturning {
  name: string;
  text: string;
  values: unknown[];
}

/**
 * `UPDATE table SET <set's columns> WHERE <where's columns all equal> [RETURNING …]`, keys in the
 * table's TypeScript names. Its batch answer is D1's result of the write, or with `returning` the
 * rows it returned.
 */
export function boundUpdate<T extends Table>(
  db: Db,
  table: T,
  set: Partial<Record<keyof T["_"]["columns"] & string, unknown>>,
  where: Partial<Record<keyof T["_"]["columns"] & string, unknown>>,
  returning?: BoundReturning,
): BatchItem<"sqlite"> {
  const columns = table as unknown as Record<string, Column>;
  // A key whose value is undefined is left alone, as drizzle's own `.set()` does (null writes NULL).
  const setKeys = Object.keys(set).filter((k) => (set as Record<string, unknown>)[k] !== undefined);
  const whereKeys = Object.keys(where);
  if (!setKeys.length || !whereKeys.length) throw new Error("a bound UPDATE sets and matches at least one column");
  const name = getTableName(table);
  const shape = `${name}|${setKeys.join(",")}|${whereKeys.join(",")}|${returning ? `${returning.name}:${returning.text}` : ""}`;
  let text = texts.get(shape);
  if (text === undefined) {
    const column = (key: string) => {
      const c = columns[key];
      if (!c || typeof c.name !== "string") throw new Error(`${name} has no column ${key}`);
      return quoted(c.name);
    };
    text =
      `UPDATE ${quoted(name)} SET ${setKeys.map((k) => `${column(k)} = ?`).join(", ")}` +
      ` WHERE ${whereKeys.map((k) => `${quoted(name)}.${column(k)} = ?`).join(" AND ")}` +
      (returning ? ` RETURNING (${returning.text}) AS ${quoted(returning.name)}` : "");
    texts.set(shape, text);
  }
  const values = [
    ...setKeys.map((k) => driverValue(columns[k], (set as Record<string, unknown>)[k])),
    ...whereKeys.map((k) => driverValue(columns[k], (where as Record<string, unknown>)[k])),
    ...(returning?.values ?? []),
  ];
  const query = text;
  const prepared = {
    getQuery: () => ({ sql: query, params: values }),
    stmt: db.$client.prepare(query),
    mapResult: (result: unknown) => (returning ? ((result as { results?: unknown[] }).results ?? []) : result),
  };
  // toSQL: what drizzle's queries answer too, so a test reads any statement of a batch alike.
  return { _prepare: () => prepared, toSQL: () => ({ sql: query, params: values }) } as unknown as BatchItem<"sqlite">;
}

/** `returning` as drizzle's own `.returning()` takes it, for a statement drizzle builds (an upsert). */
export function returningSql(returning: BoundReturning): Record<string, SQL> {
  const parts = returning.text.split("?");
  if (parts.length !== returning.values.length + 1) throw new Error("a returning's values must match its placeholders");
  const chunks = parts.flatMap((part, i) =>
    i === 0 ? [sql.raw(part)] : [sql.param(returning.values[i - 1]), sql.raw(part)],
  );
  return { [returning.name]: sql.join(chunks) };
}
