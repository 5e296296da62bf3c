/**
 * INSERT … SELECT … WHERE: a row written only while a condition holds, judged in the statement
 * itself (inside a batch's transaction). drizzle's insert-select names every column of the table
 * in the table's order and pairs the SELECT's values with them by position; here each value is
 * looked up by its column's key, and a column not given takes its default (else NULL), so a
 * column added to or moved in the table can never shift a value into its neighbour.
 */
import { getTableColumns, is, SQL, sql } from "drizzle-orm";
import type { SQLiteColumn, SQLiteTable } from "drizzle-orm/sqlite-core";
import type { Db } from "./client";

export function insertWhere<T extends SQLiteTable>(
  db: Db,
  table: T,
  values: { [K in keyof T["$inferInsert"]]?: T["$inferInsert"][K] },
  when: SQL,
) {
  const given = values as Record<string, unknown>;
  const fields: Record<string, SQL> = {};
  for (const [key, column] of Object.entries(getTableColumns(table))) {
    const value = given[key];
    fields[key] = value !== undefined ? sql`${sql.param(value, column)}` : defaultOf(column);
  }
  // SQLite selects one row from a one-row subquery; the WHERE keeps it or not.
  return db.insert(table).select(
    (qb) =>
      qb
        .select(fields)
        .from(sql`(SELECT 1)`)
        .where(when) as never,
  );
}

/**
 * What a plain drizzle insert writes into a column it is not given, in drizzle's own order: the
 * static default, else `$defaultFn()`, else `$onUpdate()`'s value, else NULL. Naming every
 * column, an INSERT … SELECT never lets the database fill one, so a default computed in
 * JavaScript must be computed here (or a NOT NULL column would refuse the row).
 */
function defaultOf(column: SQLiteColumn): SQL {
  const made =
    column.default !== undefined && column.default !== null
      ? column.default
      : column.defaultFn !== undefined
        ? column.defaultFn()
        : column.onUpdateFn !== undefined
          ? column.onUpdateFn()
          : undefined;
  if (made === undefined) return sql`NULL`;
  return is(made, SQL) ? made : sql`${sql.param(made, column)}`;
}
