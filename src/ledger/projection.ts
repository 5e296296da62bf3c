import { chunk } from "../lib/chunk";
import { and, eq, sql, type SQL } from "drizzle-orm";
import type { BatchItem } from "drizzle-orm/batch";
import type { Db } from "../db/client";
import { boundUpdate, returningSql, type BoundReturning } from "../db/bound";
import { agentInstances, serverLabels, servers } from "../db/schema";
import type { ServerRecord, DesiredState } from "../model/server/record";
import type { StoredReport } from "../model/server/schemas";
import { computeStatus } from "../model/server/status";
import { hostnameSortKey } from "../model/server/hostname-order";
import { INDEX_LEASE_MS } from "../domain/channel";

/** How often an otherwise unchanged report refreshes `last_seen` in D1 (docs/design.md §8). */
const LAST_SEEN_REFRESH_MS = 5 * 60_000;

/**
 * While its host is watched — connected on the channel (its socket's close tells the ledger), or
 * reporting over HTTP (the ledger's quiet watch, ./quiet.ts) — a server's index row is refreshed
 * this seldom, and its stale_at is leased this far beyond last_seen + stale_after: a steady host's
 * heartbeats then cost D1 one write a day, not one every few minutes. When the socket closes, the
 * quiet watch finds the host silent or the ledger wakes without the socket its lease was on
 * (./open.ts), the ledger writes the exact stale_at; a host whose reports stop with its socket open
 * is shown stale in the index at most this much late (its own view is always exact). Why that is
 * enough: docs/storage.md, "The index's staleness lease".
 */
export { INDEX_LEASE_MS };

/** How often an unchanged report refreshes last_seen in D1 (leased: the host is watched). */
function lastSeenRefreshMs(staleAfterS: number, leased = false) {
  // Refresh well inside stale-after, so a server that keeps reporting is never marked stale.
  return leased ? INDEX_LEASE_MS : Math.min(LAST_SEEN_REFRESH_MS, (staleAfterS * 1000) / 2);
}

/**
 * Whether the index's last_seen (and stale_at with it) is due: never written, written under the
 * other mode (the host connected or left the channel since), or older than the mode's interval.
 */
export function lastSeenDue(
  mark: { last_seen_written: number | null; leased?: boolean } | undefined,
  lastSeen: number,
  staleAfterS: number,
  leased: boolean,
) {
  if (mark?.last_seen_written == null || (mark.leased ?? false) !== leased) return true;
  return lastSeen - mark.last_seen_written >= lastSeenRefreshMs(staleAfterS, leased);
}

/**
 * What the index shows of one server, as signatures: the server row (except last_seen) and each
 * agent-instance row. Comparing them with the last written ones tells which rows need a write.
 */
export interface Signatures {
  server: string;
  rows: Record<string, string>;
}

export interface Projection {
  signatures: Signatures;
  server: typeof servers.$inferInsert;
  instances: (typeof agentInstances.$inferInsert)[];
}

export function buildProjection(
  record: ServerRecord,
  desired: DesiredState,
  report: StoredReport | undefined,
  now: number,
  leased = false,
): Projection {
  // The index never stores "stale": it is read from stale_at (src/model/server/staleness.ts).
  const computed = computeStatus(desired, report, now, Number.POSITIVE_INFINITY);
  const instances = computed.agents.map((a) => ({
    serverId: record.id,
    agent: a.name,
    fleetId: record.fleet_id,
    instanceId: a.desired?.instance_id ?? a.reported?.instance_id ?? null,
    desiredImage: a.desired?.image ?? null,
    desiredVersion: a.desired?.version ?? null,
    reportedImage: a.reported?.image ?? null,
    reportedVersion: a.reported?.version ?? null,
    reportedState: a.reported?.state ?? null,
    status: a.status,
    updatedAt: now,
  }));
  const server = {
    id: record.id,
    fleetId: record.fleet_id,
    hostname: record.hostname,
    hostnameSort: hostnameSortKey(record.hostname),
    kind: record.kind,
    roles: record.roles,
    labels: record.labels ?? {},
    rebootGroup: record.reboot_group,
    fleetlockId: record.fleetlock_id,
    state: record.state,
    status: computed.status,
    desiredGeneration: desired.generation,
    reportedGeneration: report?.generation ?? null,
    bootId: report?.boot_id ?? null,
    lastSeen: report?.received_at ?? null,
    staleAt: staleAtOf(record, report?.received_at, leased),
    createdAt: record.created_at,
    updatedAt: now,
  };
  // stale_at moves with last_seen (refreshed on its own schedule); stale_after stands in for it.
  // No labels leave the signature as it was before servers had labels: an unlabelled server's
  // row is not rewritten for them.
  // The sort key follows the hostname (changedColumns writes it when the hostname moves), so it
  // stays out of the signature: signatures written before it existed still match.
  const { updatedAt: _u, lastSeen: _l, staleAt: _s, hostnameSort: _h, labels, ...shown } = server;
  const rows: Record<string, string> = {};
  for (const { updatedAt: _x, ...row } of instances) rows[row.agent] = JSON.stringify(row);
  const signed = Object.keys(labels).length ? { ...shown, labels } : shown;
  return {
    signatures: { server: JSON.stringify({ ...signed, staleAfterS: record.stale_after_s }), rows },
    server,
    instances,
  };
}

/**
 * When the server turns stale in the index (read at query time, src/model/server/staleness.ts). A
 * removed server is never stale; one that never reported has nothing to be late with.
 */
function staleAtOf(record: ServerRecord, lastSeen: number | undefined, leased = false) {
  return lastSeen == null || record.state === "removed"
    ? null
    : lastSeen + record.stale_after_s * 1000 + (leased ? INDEX_LEASE_MS : 0);
}

/** Whether the index already shows everything `p` would write (last_seen aside). */
export function sameSignatures(a: Signatures, b: Signatures) {
  if (a.server !== b.server) return false;
  const ka = Object.keys(a.rows);
  return ka.length === Object.keys(b.rows).length && ka.every((k) => a.rows[k] === b.rows[k]);
}

/**
 * The D1 statements that bring the index in line with `p`, for one batch (atomic). Given what was
 * last written, only the rows that differ are written (docs/design.md §8: D1 sees writes only for
 * changes); without it (first write, or a mark from before per-row signatures) everything is
 * rewritten. `serverRowDue`: rewrite the server row even if unchanged (its last_seen is due, and
 * with it the stale_at deadline).
 */
export function projectionStatements(
  db: Db,
  p: Projection,
  written: Signatures | null,
  opts: { serverRowDue?: boolean; returning?: Returning } = {},
) {
  const names = p.instances.map((i) => i.agent);
  const { id: _id, createdAt: _c, ...serverUpdate } = p.server;
  /** Where the server row's statement stands in the batch, when it carries `opts.returning`. */
  let returnedAt: number | null = null;
  // A read that rides on the server row's statement (RETURNING) rather than as one of its own: a
  // statement less in the batch, and the same moment of reading.
  const carry = <Q extends { returning(r: Record<string, SQL>): BatchItem<"sqlite"> }>(q: Q) => {
    if (!opts.returning) return q;
    returnedAt = stmts.length;
    return q.returning(returningSql(opts.returning));
  };
  // The UPDATEs a changed report sends: their text built once per set of moved columns (./bound.ts).
  const updateServer = (set: Partial<typeof serverUpdate>) => {
    if (opts.returning) returnedAt = stmts.length;
    return boundUpdate(db, servers, set, { id: p.server.id }, opts.returning);
  };
  const upsertSet = (set: Partial<typeof serverUpdate>) =>
    carry(db.insert(servers).values(p.server).onConflictDoUpdate({ target: servers.id, set }));
  // Lists travel as one bound JSON parameter: D1 allows at most 100 per statement.
  const inList = (agents: string[], negate: boolean) =>
    db
      .delete(agentInstances)
      .where(
        and(
          eq(agentInstances.serverId, p.server.id),
          negate
            ? sql`${agentInstances.agent} NOT IN (SELECT value FROM json_each(${JSON.stringify(agents)}))`
            : sql`${agentInstances.agent} IN (SELECT value FROM json_each(${JSON.stringify(agents)}))`,
        ),
      );
  const stmts: BatchItem<"sqlite">[] = [];
  let serverRow = false;
  let rows = p.instances;
  if (!written) {
    stmts.push(upsertSet(serverUpdate), inList(names, true), ...labelStatements(db, p));
    serverRow = true;
  } else {
    const { lastSeen, staleAt, updatedAt } = p.server;
    // Only the columns that moved: D1 bills a row written for the row and for each index entry an
    // UPDATE rewrites, and SQLite rewrites an index's entry whenever the SET names one of its
    // columns, same value or not (a whole-row upsert touched all ten of the servers table's).
    // last_seen and stale_at move on their own schedule (`serverRowDue`), a change or not.
    const moved = changedColumns(written.server, p.signatures.server, serverUpdate);
    // A change of state moves them too: a removed server's deadline is gone (staleAtOf).
    const due = opts.serverRowDue === true || moved.staleAfter || moved.columns.includes("state");
    if (moved.columns.length) {
      const set: Partial<typeof serverUpdate> = {};
      for (const column of moved.columns) Object.assign(set, { [column]: serverUpdate[column] });
      set.updatedAt = updatedAt;
      if (due) Object.assign(set, { lastSeen, staleAt });
      // The row was written (the mark says so, as the heartbeat's UPDATE below trusts too): an
      // UPDATE of the moved columns binds and encodes a few values, where the upsert bound every
      // column of the row for its INSERT that never happens.
      stmts.push(updateServer(set));
      serverRow = due;
    } else if (due) {
      // Only the heartbeat moved: the two columns it changes (4 rows written with their indexes).
      stmts.push(updateServer({ lastSeen, staleAt, updatedAt }));
      serverRow = true;
    }
    if (labelsOfSignature(written.server) !== JSON.stringify(p.server.labels ?? {}))
      stmts.push(...labelStatements(db, p));
    const removed = Object.keys(written.rows).filter((agent) => !(agent in p.signatures.rows));
    if (removed.length) stmts.push(inList(removed, false));
    rows = p.instances.filter((i) => written.rows[i.agent] !== p.signatures.rows[i.agent]);
  }
  return {
    statements: [...stmts, ...instanceStatements(db, rows, written)],
    serverRow,
    returnedAt: returnedAt as number | null,
  };
}

/** What a server row's statement returns besides its write (`projectionStatements`' `returning`). */
export type Returning = BoundReturning;

type ServerColumn = Exclude<
  keyof typeof servers.$inferInsert,
  "id" | "createdAt" | "lastSeen" | "staleAt" | "updatedAt"
>;

/**
 * The server row's columns whose value differs between two signatures (labels included when they
 * moved), and whether stale_after did (stale_at follows it). An unreadable old signature (a mark
 * of an older release) names every column.
 */
function changedColumns(
  before: string,
  after: string,
  row: Record<string, unknown>,
): { columns: ServerColumn[]; staleAfter: boolean } {
  if (before === after) return { columns: [], staleAfter: false };
  const a = parseSignature(before);
  const b = parseSignature(after);
  const all = Object.keys(row).filter((k) => !["lastSeen", "staleAt", "updatedAt"].includes(k)) as ServerColumn[];
  if (!a || !b) return { columns: all, staleAfter: true };
  const same = (k: string) =>
    JSON.stringify(a[k] ?? (k === "labels" ? {} : null)) === JSON.stringify(b[k] ?? (k === "labels" ? {} : null));
  const columns = all.filter((k) => k !== "hostnameSort" && !same(k));
  if (columns.includes("hostname")) columns.push("hostnameSort");
  return { columns, staleAfter: !same("staleAfterS") };
}

function parseSignature(signature: string): Record<string, unknown> | null {
  try {
    const parsed: unknown = JSON.parse(signature);
    return parsed !== null && typeof parsed === "object" ? (parsed as Record<string, unknown>) : null;
  } catch {
    return null;
  }
}

type InstanceRow = typeof agentInstances.$inferInsert;
type InstanceColumn = Exclude<keyof InstanceRow, "serverId" | "agent" | "fleetId" | "updatedAt">;
const INSTANCE_COLUMNS: Record<InstanceColumn, string> = {
  instanceId: "instance_id",
  desiredImage: "desired_image",
  desiredVersion: "desired_version",
  reportedImage: "reported_image",
  reportedVersion: "reported_version",
  reportedState: "reported_state",
  status: "status",
};

/**
 * Upserts of the instance rows that changed, each setting only its columns that moved (so a status
 * that moves alone does not rewrite the image indexes' entries), rows that moved alike sharing a
 * statement; a row never written (or with nothing to compare) sets every column. A row written
 * before whose moved columns no other row shares is an UPDATE of those columns alone.
 */
function instanceStatements(db: Db, rows: InstanceRow[], written: Signatures | null) {
  const groups = new Map<string, { columns: InstanceColumn[]; rows: InstanceRow[] }>();
  const every = Object.keys(INSTANCE_COLUMNS) as InstanceColumn[];
  for (const row of rows) {
    const before = written?.rows[row.agent] === undefined ? null : parseSignature(written.rows[row.agent]);
    const columns = before
      ? every.filter((c) => (before[c] ?? null) !== ((row as Record<string, unknown>)[c] ?? null))
      : every;
    const key = columns.join(",");
    const group = groups.get(key) ?? { columns, rows: [] };
    group.rows.push(row);
    groups.set(key, group);
  }
  return [...groups.values()].flatMap(({ columns, rows }): BatchItem<"sqlite">[] =>
    rows.length === 1 && written?.rows[rows[0].agent] !== undefined
      ? // One row written before that moved alone (a report's usual change: one agent's state): an
        // UPDATE of its moved columns, a few values bound instead of the whole row's.
        [updateInstance(db, rows[0], columns)]
      : chunk(rows, INSTANCE_ROWS_PER_STATEMENT).map((part) =>
          db
            .insert(agentInstances)
            .values(part)
            .onConflictDoUpdate({
              target: [agentInstances.serverId, agentInstances.agent],
              set: Object.fromEntries([
                ...columns.map((c) => [c, sql.raw(`excluded.${INSTANCE_COLUMNS[c]}`)]),
                ["updatedAt", sql`excluded.updated_at`],
              ]),
            }),
        ),
  );
}

function updateInstance(db: Db, row: InstanceRow, columns: InstanceColumn[]) {
  const set: Partial<InstanceRow> = {};
  for (const c of columns) set[c] = (row[c] ?? null) as never;
  set.updatedAt = row.updatedAt;
  return boundUpdate(db, agentInstances, set, { serverId: row.serverId, agent: row.agent });
}

/** The labels a server signature shows, as JSON ({} for one written without labels). */
function labelsOfSignature(signature: string): string {
  try {
    return JSON.stringify((JSON.parse(signature) as { labels?: unknown }).labels ?? {});
  } catch {
    return "";
  }
}

/**
 * The server's rows of the label index, replaced: a delete and one insert in the projection's
 * batch (atomic, so a retried batch leaves exactly these rows). Written only when the labels
 * changed since the last written signature, or with no signature to compare.
 */
function labelStatements(db: Db, p: Projection) {
  const labels = Object.entries(p.server.labels ?? {});
  const clear = db.delete(serverLabels).where(eq(serverLabels.serverId, p.server.id));
  if (!labels.length) return [clear];
  // 16 labels × 4 columns stay inside D1's 100 bound parameters.
  return [
    clear,
    db
      .insert(serverLabels)
      .values(labels.map(([key, value]) => ({ serverId: p.server.id, fleetId: p.server.fleetId, key, value }))),
  ];
}

/** 11 columns a row; D1 binds at most 100 parameters per statement. */
const INSTANCE_ROWS_PER_STATEMENT = 9;
