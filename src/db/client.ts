import { drizzle } from "drizzle-orm/d1";
import * as schema from "./schema";

/**
 * Statement counters around the D1 binding, exported on /metrics. The scale model (docs/design.md §8)
 * says unchanged reports must cost no D1 write; this is how the benchmark proves it.
 */
export const d1Counters = { reads: 0, writes: 0 };

const WRITE = /^\s*(insert|update|delete|replace)\b/i;
const underlying = new WeakMap<object, { stmt: D1PreparedStatement; sql: string }>();

function count(sql: string, n = 1) {
  if (WRITE.test(sql)) d1Counters.writes += n;
  else d1Counters.reads += n;
}

function wrapStatement(stmt: D1PreparedStatement, sql: string): D1PreparedStatement {
  const proxy = new Proxy(stmt, {
    get(target, prop) {
      if (prop === "bind") {
        return (...args: unknown[]) => wrapStatement(target.bind(...args), sql);
      }
      if (prop === "run" || prop === "all" || prop === "first" || prop === "raw") {
        const fn = (target as unknown as Record<string, (...a: unknown[]) => unknown>)[prop];
        return (...args: unknown[]) => {
          count(sql);
          return fn.apply(target, args);
        };
      }
      const value = Reflect.get(target, prop, target);
      return typeof value === "function" ? value.bind(target) : value;
    },
  });
  underlying.set(proxy, { stmt, sql });
  return proxy;
}

const wrapped = new WeakMap<D1Database, D1Database>();

export function countingD1(db: D1Database): D1Database {
  const existing = wrapped.get(db);
  if (existing) return existing;
  const proxy = new Proxy(db, {
    get(target, prop) {
      if (prop === "prepare") {
        return (sql: string) => wrapStatement(target.prepare(sql), sql);
      }
      if (prop === "batch") {
        return (stmts: D1PreparedStatement[]) => {
          const raw = stmts.map((s) => {
            const known = underlying.get(s);
            count(known?.sql ?? "select");
            return known?.stmt ?? s;
          });
          return target.batch(raw);
        };
      }
      const value = Reflect.get(target, prop, target);
      return typeof value === "function" ? value.bind(target) : value;
    },
  });
  wrapped.set(db, proxy);
  return proxy;
}

export function getDb(d1: D1Database) {
  return drizzle(countingD1(d1), { schema });
}

export type Db = ReturnType<typeof getDb>;
