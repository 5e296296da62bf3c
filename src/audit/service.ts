import { tokenActorNames } from "../auth/store";
import { getDb } from "../db/client";
import { visibleFleets, type Principal } from "../domain/principal";
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
  const actors = await tokenActorNames(
    db,
    rows.map((r) => r.actor),
  );
  return rows.map((r) => ({
    ...r,
    hostname: r.target.startsWith(SERVER) ? (names.get(r.target.slice(SERVER.length)) ?? null) : null,
    actor_name: actors.get(r.actor) ?? null,
  }));
}
