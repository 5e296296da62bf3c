/**
 * A fleet spec's `servers` section: labels by hostname (`web-1: {labels: {zone: eu-1a}}`), merged
 * into each named server's labels as PATCH /v1/servers/{id} merges them (a null value removes its
 * key; keys not named are kept). Servers the spec does not name are never touched, with or
 * without prune: prune only stops declaring a hostname.
 *
 * Where each fact lives: the declaration (each hostname's patch, as the spec last gave it) is
 * fleet intent, a `spec_server_labels` row committed in the apply's one batch; a live server's
 * labels are its ledger's, reached only through the ledger's setLabels (the one writer PATCH uses)
 * by the `apply_server_labels` fleet task that rides in the same batch (tried at once, retried by
 * the cron). A hostname no live server has yet is pending: a server registered under it later
 * starts with the declaration merged over its own labels (src/servers/service.ts).
 */
import { z } from "@hono/zod-openapi";
import { and, eq, inArray, ne, sql } from "drizzle-orm";
import type { Db } from "../db/client";
import { servers, specServerLabels } from "../db/schema";
import { MAX_SERVER_LABELS } from "../domain/limits";
import { chunk } from "../lib/chunk";
import { labelsPatchSchema, mergeLabels, sameLabels, type Labels } from "../model/server/labels";
import { HOSTNAME } from "../servers/naming";
import { byKey, sameValue } from "./canonical";
import type { Problem } from "./validate";

type Patch = Record<string, string | null>;

export const specHostname = z
  .string()
  .max(253)
  .regex(HOSTNAME, "not a valid hostname")
  .refine((h) => h === h.toLowerCase(), "hostnames are lowercase here, as servers are registered");

export const SpecServer = z
  .strictObject({
    labels: labelsPatchSchema.openapi({
      description:
        "Merged into the server's labels as PATCH /v1/servers/{id} merges them; a null value removes its key",
    }),
  })
  .openapi("SpecServer");
export type SpecServer = z.infer<typeof SpecServer>;

/** The fleet's side of the section. */
export interface ServersState {
  /** Each declared hostname's patch, as the last apply that named it gave it. */
  declared: Record<string, Patch>;
  /** Patches an apply committed that the servers' ledgers have not all taken yet (the fleet task's). */
  owed: Record<string, Patch>;
  /** Live servers' labels by hostname (those the spec or the declaration names), owed patches merged in. */
  live: Record<string, Labels>;
}

/** The `apply_server_labels` task's payload: the patches still to hand to the servers' ledgers. */
export interface ServerLabelsTask {
  actor: string;
  servers: Record<string, Patch>;
}

/** The declaration, and what an earlier apply still owes the servers (read in the spec's batch, ./store.ts). */
export const declaredQuery = (db: Db, fleet: string) =>
  db
    .select({ hostname: specServerLabels.hostname, labels: specServerLabels.labels })
    .from(specServerLabels)
    .where(eq(specServerLabels.fleetId, fleet));

/** The labels of the fleet's live servers with these hostnames (D1's index of their ledgers). */
export async function liveLabels(db: Db, fleet: string, hostnames: string[]): Promise<Record<string, Labels>> {
  const out: Record<string, Labels> = {};
  for (const part of chunk(hostnames, 80)) {
    const rows = await db
      .select({ hostname: servers.hostname, labels: servers.labels })
      .from(servers)
      .where(and(eq(servers.fleetId, fleet), ne(servers.state, "removed"), inArray(servers.hostname, part)));
    for (const r of rows) out[r.hostname] = r.labels;
  }
  return out;
}

/** The section as GET …/spec shows it: the declaration. */
export const serversSpecOf = (s: ServersState) =>
  byKey(Object.entries(s.declared).map(([h, labels]) => [h, { labels: byKey(Object.entries(labels)) }]));

export interface ServersPlan {
  items: {
    name: string;
    op: "add" | "change" | "remove" | "unlisted";
    before: unknown;
    after: unknown;
    note?: string;
  }[];
  /** Declarations to write (the spec's patch per hostname) and to drop (prune). */
  declare: Record<string, Patch>;
  undeclare: string[];
  /** Patches for live servers' ledgers, merged over what is owed already; null: nothing to hand over. */
  task: Record<string, Patch> | null;
}

/**
 * What the section changes. A named hostname is an item when its declaration changes or its live
 * server's labels do not yet hold the spec's patch; `before` and `after` are the server's labels
 * (or, for a hostname no server has, the declaration). Declared hostnames the spec leaves out
 * are unlisted (prune: no longer declared; their servers keep their labels).
 */
export function planServers(state: ServersState, spec: Record<string, SpecServer>, prune: boolean): ServersPlan {
  const items: ServersPlan["items"] = [];
  const declare: Record<string, Patch> = {};
  const task: Record<string, Patch> = {};
  const named = Object.keys(spec).sort();
  for (const h of named) {
    const patch = spec[h].labels;
    const declared = Object.hasOwn(state.declared, h) ? state.declared[h] : null;
    const live = Object.hasOwn(state.live, h) ? state.live[h] : null;
    const newDeclaration = !sameValue(declared, patch);
    const base = live ?? mergeLabels({}, declared ?? {});
    const after = mergeLabels(base, patch);
    const moves = live !== null && !sameLabels(live, after);
    if (!newDeclaration && !moves) continue;
    if (newDeclaration) declare[h] = patch;
    if (moves) task[h] = patch;
    items.push({
      name: h,
      op: declared === null ? "add" : "change",
      before: declared === null && live === null ? null : { labels: base },
      after: { labels: after },
      ...(live === null
        ? { note: `no server '${h}' in the fleet yet: its labels wait for it to register (pending)` }
        : {}),
    });
  }
  const undeclare: string[] = [];
  for (const h of Object.keys(state.declared).sort()) {
    if (Object.hasOwn(spec, h)) continue;
    if (prune) undeclare.push(h);
    items.push({
      name: h,
      op: prune ? "remove" : "unlisted",
      before: { labels: byKey(Object.entries(state.declared[h])) },
      after: null,
      ...(prune ? { note: "no longer declared; the server keeps its labels" } : {}),
    });
  }
  const moving = Object.keys(task).length > 0;
  return {
    items,
    declare,
    undeclare,
    // The whole owed set with the new patches over it: a newer task replaces the older one.
    task: moving ? mergeOwed(state.owed, task) : null,
  };
}

function mergeOwed(owed: Record<string, Patch>, next: Record<string, Patch>) {
  const all: Record<string, Patch> = { ...owed };
  for (const [h, p] of Object.entries(next)) all[h] = { ...all[h], ...p };
  return byKey(Object.entries(all));
}

/** A named server would carry more labels than a server may: a problem of the spec, with its path. */
export function labelCountProblems(state: ServersState, spec: Record<string, SpecServer>): Problem[] {
  const problems: Problem[] = [];
  for (const [h, { labels }] of Object.entries(spec)) {
    const base = state.live[h] ?? mergeLabels({}, state.declared[h] ?? {});
    const n = Object.keys(mergeLabels(base, labels)).length;
    if (n > MAX_SERVER_LABELS)
      problems.push({
        path: `servers.${h}.labels`,
        message: `the server would have ${n} labels; at most ${MAX_SERVER_LABELS}`,
      });
  }
  return problems;
}

type Statement = Parameters<Db["batch"]>[0][number];

/**
 * The declaration's rows an apply writes (the task rides beside them: ./apply.ts): one upsert per
 * declared hostname (MAX_SPEC_SERVERS bounds them, as the other sections' limits bound theirs) and
 * one delete, its hostnames as one JSON parameter (json_each) so a prune of any size stays within
 * D1's bound parameters.
 */
export function serverStatements(db: Db, actor: string, fleet: string, plan: ServersPlan, now: number): Statement[] {
  const out: Statement[] = [];
  for (const [hostname, labels] of Object.entries(plan.declare))
    out.push(
      db
        .insert(specServerLabels)
        .values({ fleetId: fleet, hostname, labels, updatedAt: now, updatedBy: actor })
        .onConflictDoUpdate({
          target: [specServerLabels.fleetId, specServerLabels.hostname],
          set: { labels, updatedAt: now, updatedBy: actor },
        }),
    );
  if (plan.undeclare.length)
    out.push(
      db
        .delete(specServerLabels)
        .where(
          and(
            eq(specServerLabels.fleetId, fleet),
            inArray(specServerLabels.hostname, sql`(SELECT value FROM json_each(${JSON.stringify(plan.undeclare)}))`),
          ),
        ),
    );
  return out;
}
