import { inArray, sql } from "drizzle-orm";
import { getDb, type Db } from "../db/client";
import { tokens } from "../db/schema";
import { BOOTSTRAP_ID, visibleFleets, type Principal } from "../domain/principal";
import type { Env } from "../env";
import { hostnamesOf, resolveServer } from "../servers/service";
import { listAudit } from "./store";

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
  const ids = rows.filter((r) => r.target.startsWith(SERVER)).map((r) => r.target.slice(SERVER.length));
  const names = await hostnamesOf(env, ids);
  const actors = await actorNames(
    db,
    rows.map((r) => r.actor),
  );
  return rows.map((r) => ({
    ...r,
    hostname: r.target.startsWith(SERVER) ? (names.get(r.target.slice(SERVER.length)) ?? null) : null,
    actor_name: actors.get(r.actor) ?? null,
  }));
}

const TOKEN = "token:";

/** The names of the operator tokens among these actors, so a row says who acted, not only a uuid. */
async function actorNames(db: Db, actors: string[]): Promise<Map<string, string>> {
  const ids = [...new Set(actors.filter((a) => a.startsWith(TOKEN)).map((a) => a.slice(TOKEN.length)))];
  const out = new Map<string, string>();
  if (ids.includes(BOOTSTRAP_ID)) out.set(TOKEN + BOOTSTRAP_ID, "ADMIN_TOKEN");
  const uuids = ids.filter((id) => id !== BOOTSTRAP_ID);
  if (uuids.length === 0) return out;
  const rows = await db
    .select({ id: tokens.id, name: tokens.name })
    .from(tokens)
    .where(inArray(tokens.id, sql`(SELECT value FROM json_each(${JSON.stringify(uuids)}))`));
  for (const r of rows) out.set(TOKEN + r.id, r.name);
  return out;
}
