/**
 * The event log of a Rollout object, in the format of storage-format.ts: what happened to the
 * rollout and its targets, in order (GET …/events), and the slow-server warnings of its summary.
 */

export class EventLog {
  constructor(private readonly sql: SqlStorage) {}

  /** Appends an event; returns its row id (the rollout's webhook events are named by it). */
  add(kind: string, serverId: string | null, details: unknown, at: number): number {
    return this.sql
      .exec<{ id: number }>(
        "INSERT INTO events (at, kind, server_id, details) VALUES (?, ?, ?, ?) RETURNING id",
        at,
        kind,
        serverId,
        details === undefined ? null : JSON.stringify(details),
      )
      .one().id;
  }

  /** Events of a page, with the hostname of their server (every server is a target of pass 0): `limit + 1` rows, so the caller knows whether more follow. */
  page(after: number, limit: number) {
    return this.sql
      .exec<{
        id: number;
        at: number;
        kind: string;
        server_id: string | null;
        hostname: string | null;
        details: string | null;
      }>(
        `SELECT e.id, e.at, e.kind, e.server_id, e.details,
           (SELECT t.hostname FROM targets t WHERE t.pass = 0 AND t.server_id = e.server_id) AS hostname
         FROM events e WHERE e.id > ? ORDER BY e.id LIMIT ?`,
        after,
        limit + 1,
      )
      .toArray();
  }

  /** The latest slow-server warnings, newest first. */
  slowWarnings(limit: number) {
    return this.sql
      .exec<{ server_id: string; at: number; details: string }>(
        "SELECT server_id, at, details FROM events WHERE kind = 'warning.slow_server' ORDER BY id DESC LIMIT ?",
        limit,
      )
      .toArray()
      .map((w) => {
        const d = JSON.parse(w.details) as { hostname: string; message: string };
        return { server_id: w.server_id, hostname: d.hostname, at: w.at, message: d.message };
      });
  }
}
