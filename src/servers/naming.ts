/**
 * Servers named the way operators name them (docs/operator-guide.md): a server id, a hostname, or
 * `fleet/hostname`. A hostname is unique among a fleet's live servers (registration refuses a
 * second one, `hostname_taken`); across fleets it may repeat, and a hostname that names live
 * servers in several fleets is `409 ambiguous_server`, listing them: `?fleet=` or the
 * `fleet/hostname` form picks one. Removed servers (tombstones) are named by id, except in the audit
 * log, whose history a removed server's hostname still finds. An id costs
 * no read; a hostname one indexed D1 read (servers_hostname_idx / servers_fleet_hostname_idx).
 */
import { and, asc, eq, ne } from "drizzle-orm";
import type { Db } from "../db/client";
import { servers } from "../db/schema";
import { inVisibleFleets } from "../db/access";
import { DomainError, notFound } from "../domain/errors";
import { FLEET_ID } from "../model/fleet";

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;
const LABEL = "[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?";
export const HOSTNAME = new RegExp(`^(?=.{1,253}$)${LABEL}(?:\\.${LABEL})*$`);

/** Whether `ref` is a server id, a hostname or `fleet/hostname` (the syntax only). */
export function isServerRef(ref: string): boolean {
  if (UUID.test(ref)) return true;
  const slash = ref.indexOf("/");
  if (slash < 0) return HOSTNAME.test(ref);
  return FLEET_ID.test(ref.slice(0, slash)) && HOSTNAME.test(ref.slice(slash + 1));
}

interface NamedServer {
  id: string;
  fleet: string;
  hostname: string;
}

/** How many servers an ambiguity lists. */
const CANDIDATES = 20;

/**
 * The id of the server `ref` names (in `fleet`, when given). An id is answered as is: whether it
 * exists is for the caller's read to say.
 */
export async function serverIdOf(
  db: Db,
  ref: string,
  fleet?: string,
  opts: { removedToo?: boolean; visible?: readonly string[] | null } = {},
): Promise<string> {
  const visible = opts.visible ?? null;
  if (UUID.test(ref)) {
    const id = ref.toLowerCase();
    if (visible === null) return id;
    // A server of a fleet the token may not see is answered as one that does not exist.
    const [row] = await db.select({ fleet: servers.fleetId }).from(servers).where(eq(servers.id, id)).limit(1);
    if (!row || !visible.includes(row.fleet)) throw notFound("server", id);
    return id;
  }
  const slash = ref.indexOf("/");
  const inFleet = slash < 0 ? fleet : ref.slice(0, slash);
  const hostname = (slash < 0 ? ref : ref.slice(slash + 1)).toLowerCase();
  if (slash >= 0 && fleet && fleet !== inFleet) {
    throw new DomainError("invalid_query", `'${ref}' names fleet '${inFleet}', but ?fleet= says '${fleet}'`);
  }
  const named = (removed: boolean) =>
    db
      .select({ id: servers.id, fleet: servers.fleetId, hostname: servers.hostname })
      .from(servers)
      .where(
        and(
          eq(servers.hostname, hostname),
          inFleet ? eq(servers.fleetId, inFleet) : undefined,
          inVisibleFleets(servers.fleetId, visible),
          removed ? eq(servers.state, "removed") : ne(servers.state, "removed"),
        ),
      )
      .orderBy(asc(servers.fleetId), asc(servers.id))
      .limit(CANDIDATES + 1);
  let rows = await named(false);
  // A history (the audit log) may ask about a server that is gone: its tombstone answers then.
  if (rows.length === 0 && opts.removedToo) rows = await named(true);
  if (rows.length === 1) return rows[0].id;
  if (rows.length === 0) {
    throw new DomainError("not_found", `no server is named '${hostname}'${inFleet ? ` in fleet '${inFleet}'` : ""}`);
  }
  throw ambiguous(hostname, rows.slice(0, CANDIDATES));
}

function ambiguous(hostname: string, rows: NamedServer[]) {
  const fleets = [...new Set(rows.map((r) => r.fleet))];
  const how =
    fleets.length > 1
      ? `say which fleet: ?fleet=${fleets[0]} or ${fleets[0]}/${hostname}`
      : `they are in the same fleet (registered concurrently): name one by id`;
  return new DomainError(
    "ambiguous_server",
    `hostname '${hostname}' names ${rows.length} servers (${rows.map((r) => `${r.fleet}/${r.id}`).join(", ")}); ${how}`,
    {
      candidates: rows,
    },
  );
}

/** Registration: a live server of the fleet already has this hostname (409 hostname_taken). */
export async function refuseTakenHostname(db: Db, fleet: string, hostname: string) {
  const taken = await db
    .select({ id: servers.id })
    .from(servers)
    .where(and(eq(servers.fleetId, fleet), eq(servers.hostname, hostname.toLowerCase()), ne(servers.state, "removed")))
    .limit(1);
  if (taken.length) {
    throw new DomainError(
      "hostname_taken",
      `fleet '${fleet}' already has a server named '${hostname.toLowerCase()}' (${taken[0].id})`,
      {
        server_id: taken[0].id,
      },
    );
  }
}
