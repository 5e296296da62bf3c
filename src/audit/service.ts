import { tokenActorNames } from "../auth/store";
import { getDb, type Db } from "../db/client";
import { auditLog } from "../db/schema";
import { visibleFleets, type Principal } from "../domain/principal";
import type { Env } from "../env";
import { hostnamesOf, resolveServer } from "../servers/service";
import { iso } from "../lib/time";
import type { AuditLine } from "./archive";
import { auditAfter, idBefore, listAudit } from "./store";

type AuditRow = typeof auditLog.$inferSelect;

const SERVER = "server:";

/**
 * A page of the audit log, newest first, optionally of one target; a server target may be named
 * by hostname (`server:node-1.example.com`, `server:prod/node-1.example.com`). Entries about a
 * server carry its hostname, so nobody reads uuids.
 */
export async function searchAudit(
  env: Env,
  principal: Principal,
  opts: { target?: string; before?: number; limit: number },
) {
  const target = opts.target?.startsWith(SERVER)
    ? SERVER + (await resolveServer(env, principal, opts.target.slice(SERVER.length), undefined, { removedToo: true }))
    : opts.target;
  const db = getDb(env.DB);
  const rows = await listAudit(db, { ...opts, target, visible: visibleFleets(principal) });
  return (await withNames(env, db, rows)).map(lineOf);
}

/** Rows with the hostname of a server target and the name of a token actor. */
async function withNames(env: Env, db: Db, rows: AuditRow[]) {
  const ids = rows.filter((r) => r.target.startsWith(SERVER)).map((r) => r.target.slice(SERVER.length));
  // Two independent reads, one round trip each, sent together.
  const [names, actors] = await Promise.all([
    hostnamesOf(env, ids),
    tokenActorNames(
      db,
      rows.map((r) => r.actor),
    ),
  ]);
  return rows.map((r) => ({
    ...r,
    hostname: r.target.startsWith(SERVER) ? (names.get(r.target.slice(SERVER.length)) ?? null) : null,
    actor_name: actors.get(r.actor) ?? null,
  }));
}

/** The line of one row, as the export streams it and the day files hold it. */
const lineOf = (r: Awaited<ReturnType<typeof withNames>>[number]): AuditLine => ({
  id: r.id,
  at: iso(r.at),
  actor: r.actor,
  actor_name: r.actor_name,
  action: r.action,
  target: r.target,
  hostname: r.hostname,
  details: r.details ?? null,
});

/** Audit lines after id `after` (oldest first), up to `upTo`: for the day files, every fleet's. */
export async function auditLines(
  env: Env,
  opts: { after: number; upTo?: number; limit: number; visible?: readonly string[] | null },
) {
  return (await auditLinesFrom(env, opts)).map((r) => r.line);
}

/**
 * As auditLines, each with whether an object's outbox delivered the row (it has an event id) rather
 * than a D1 service's own batch: such an owner sent its console notices durably itself.
 */
export async function auditLinesFrom(
  env: Env,
  opts: { after: number; upTo?: number; limit: number; visible?: readonly string[] | null },
) {
  const db = getDb(env.DB);
  const rows = await auditAfter(db, opts);
  return (await withNames(env, db, rows)).map((r) => ({ line: lineOf(r), outboxed: r.eventId !== null }));
}

/**
 * One page of the export: up to `limit` rows the principal may read, oldest first, after the
 * cursor's id (or from the first row dated `since` or later). The next cursor is the last row's id,
 * or the same position when nothing is there yet, so a client polls with it and never misses a
 * row written while it read: ids are given in commit order and never reused.
 */
export async function exportPage(
  env: Env,
  principal: Principal,
  opts: { after: number | null; since?: number; limit: number },
) {
  const after = opts.after ?? (opts.since !== undefined ? await idBefore(getDb(env.DB), opts.since) : 0);
  const lines = await auditLines(env, { after, limit: opts.limit + 1, visible: visibleFleets(principal) });
  const more = lines.length > opts.limit;
  const page = lines.slice(0, opts.limit);
  return { lines: page, last: page.at(-1)?.id ?? after, more };
}
