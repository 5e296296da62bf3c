/**
 * Server labels (`{"zone": "eu-1a", "rack": "r12"}`): their schema, the PATCH merge, and the
 * `label=` filter terms of the list routes. Pure (the filter as SQL conditions included).
 */
import { z } from "@hono/zod-openapi";
import { sql, type SQL } from "drizzle-orm";
import type { SQLiteColumn } from "drizzle-orm/sqlite-core";
import { serverLabels } from "../../db/schema";
import {
  MAX_LABEL_FILTERS,
  MAX_LABEL_KEY_LENGTH,
  MAX_LABEL_VALUE_LENGTH,
  MAX_SERVER_LABELS,
} from "../../domain/limits";
import { userKeyed } from "../../lib/user-keys";

/** Kubernetes' label-name shape: starts and ends with [a-z0-9]. */
const LABEL_KEY = new RegExp(`^[a-z0-9]([a-z0-9._/-]{0,${MAX_LABEL_KEY_LENGTH - 2}}[a-z0-9])?$`);
/** Kubernetes' label-value shape, without the empty value (so `label=zone=` cannot mean two things). */
const LABEL_VALUE = new RegExp(`^[A-Za-z0-9]([A-Za-z0-9._-]{0,${MAX_LABEL_VALUE_LENGTH - 2}}[A-Za-z0-9])?$`);

export type Labels = Record<string, string>;

export const labelKey = z
  .string()
  .regex(
    LABEL_KEY,
    `a label key: lowercase letters, digits, '.', '_', '/', '-', at most ${MAX_LABEL_KEY_LENGTH}, starting and ending with a letter or digit`,
  );
const labelValue = z
  .string()
  .regex(
    LABEL_VALUE,
    `a label value: letters, digits, '.', '_', '-', 1 to ${MAX_LABEL_VALUE_LENGTH}, starting and ending with a letter or digit`,
  );

const fewEnough = [
  (l: object) => Object.keys(l).length <= MAX_SERVER_LABELS,
  { message: `at most ${MAX_SERVER_LABELS} labels` },
] as const;

/** A server's labels as registration (and enrollment) sets them. */
export const labelsSchema = userKeyed(z.record(labelKey, labelValue).refine(...fewEnough)).openapi({
  description: `Labels: at most ${MAX_SERVER_LABELS}, keys like Kubernetes label names, values up to ${MAX_LABEL_VALUE_LENGTH} characters`,
  example: { zone: "eu-1a", rack: "r12" },
});

/** PATCH: merged into the server's labels; a null value removes its key. */
export const labelsPatchSchema = userKeyed(z.record(labelKey, labelValue.nullable()).refine(...fewEnough)).openapi({
  description: "Merged into the server's labels (keys not named are kept); a null value removes its key",
  example: { zone: "eu-1b", rack: null },
});

/** The labels after a PATCH's merge, keys sorted (so equal label sets compare equal as JSON). */
export function mergeLabels(current: Labels, patch: Record<string, string | null>): Labels {
  const next: Labels = { ...current };
  for (const [k, v] of Object.entries(patch)) {
    if (v === null) delete next[k];
    else next[k] = v;
  }
  return sortedLabels(next);
}

export function sortedLabels(labels: Labels): Labels {
  return Object.fromEntries(Object.entries(labels).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)));
}

export const sameLabels = (a: Labels, b: Labels) => JSON.stringify(sortedLabels(a)) === JSON.stringify(sortedLabels(b));

/** One `label=` term: `key=value` (equal) or `key` (has the key). */
export interface LabelTerm {
  key: string;
  value?: string;
}

const labelTerm = z
  .string()
  .max(MAX_LABEL_KEY_LENGTH + 1 + MAX_LABEL_VALUE_LENGTH)
  .transform((s, ctx): LabelTerm => {
    const at = s.indexOf("=");
    const key = at < 0 ? s : s.slice(0, at);
    const value = at < 0 ? undefined : s.slice(at + 1);
    if (!LABEL_KEY.test(key)) ctx.addIssue({ code: "custom", message: `'${key}' is not a label key` });
    else if (value !== undefined && !LABEL_VALUE.test(value))
      ctx.addIssue({ code: "custom", message: `'${value}' is not a label value` });
    return value === undefined ? { key } : { key, value };
  });

/**
 * `?label=zone=eu-1a&label=rack`: every term must hold (AND). Hono hands a repeated parameter over
 * as an array and a single one as a string; both are taken.
 */
export const labelQuery = z
  .union([z.string(), z.array(z.string())])
  .transform((v) => (Array.isArray(v) ? v : [v]))
  .pipe(z.array(labelTerm).max(MAX_LABEL_FILTERS, `at most ${MAX_LABEL_FILTERS} label terms`))
  .optional()
  .openapi({
    type: "array",
    items: { type: "string" },
    description: `Repeatable, every term must hold: \`zone=eu-1a\` (the label has this value) or \`zone\` (the server has the label); at most ${MAX_LABEL_FILTERS}`,
    example: ["zone=eu-1a"],
  } as never);

/** Whether labels satisfy every term. */
export const labelsMatch = (labels: Labels, terms: LabelTerm[]) =>
  terms.every((t) => (t.value === undefined ? t.key in labels : labels[t.key] === t.value));

/**
 * Servers whose labels hold every term: each a lookup by the label index's primary key
 * (server_id, key) for each server the query walks. (`id IN (SELECT …)` would read every entry of
 * the term first: 2,500 rows for a zone of a 10,000-server fleet, for a page of 20.) A query that
 * is better driven from a rare label's own entries says so with `driveFrom` (./store.ts).
 */
export function labelConditions(terms: LabelTerm[] | undefined, serverId: SQLiteColumn): SQL[] {
  return (terms ?? []).map((t) => {
    const value = t.value === undefined ? sql`` : sql` AND ${serverLabels.value} = ${t.value}`;
    return sql`EXISTS (SELECT 1 FROM ${serverLabels} WHERE ${serverLabels.serverId} = ${serverId} AND ${serverLabels.key} = ${t.key}${value})`;
  });
}
