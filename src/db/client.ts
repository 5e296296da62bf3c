import { drizzle } from "drizzle-orm/d1";
import * as schema from "./schema";

/**
 * The deployed worker's D1: plain drizzle over the binding. The local cost meter counts statements
 * and rows by handing each sender a tapped binding instead (src/local/d1-taps.ts), only in the
 * local entry (src/local/index.ts) that benchmarks and cost runs select.
 */
export function getDb(d1: D1Database) {
  return drizzle(d1, { schema });
}

export type Db = ReturnType<typeof getDb>;
