import { inArray, sql, type Column, type SQL } from "drizzle-orm";

/**
 * A list's condition for what a token may see: nothing to add for every fleet (null), else the
 * fleet column among the token's names (an empty list matches nothing).
 */
export function inVisibleFleets(column: Column, fleets: readonly string[] | null): SQL | undefined {
  if (fleets === null) return undefined;
  if (fleets.length === 0) return sql`0`;
  return inArray(column, [...fleets]);
}
