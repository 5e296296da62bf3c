import { sql, type Column, type SQL } from "drizzle-orm";

/**
 * A list's condition for what a token may see: nothing to add for every fleet (null), else the
 * fleet column among the token's names (an empty list matches nothing). The names go as one JSON
 * parameter (json_each), so a token of many fleets, in a query that repeats the condition, stays
 * within D1's bound parameters.
 */
export function inVisibleFleets(column: Column, fleets: readonly string[] | null): SQL | undefined {
  if (fleets === null) return undefined;
  if (fleets.length === 0) return sql`0`;
  return sql`${column} IN (SELECT value FROM json_each(${JSON.stringify(fleets)}))`;
}
