/**
 * The format of a Rollout object's own storage (its SQL tables; the spec and core live in its KV).
 * The object records the format it is in and applies the steps from there to the newest once,
 * not on every wake. A rollout written before formats were recorded is format 1: that code created
 * the format 1 tables on every wake. An object that never held a rollout is format 0 and gets its
 * tables with the rollout's first write, so probing an unknown id writes nothing.
 *
 * Steps name tables and columns literally, as they are in the format they produce; they are
 * idempotent (IF NOT EXISTS), since a format 1 object may or may not have every table yet.
 */

export const ROLLOUT_FORMAT = 5;
export const FORMAT_KEY = "format";

interface FormatStep {
  /** The format this step produces from the one before it. */
  to: number;
  description: string;
  apply(sql: SqlStorage): void;
}

/** Adds a column to `targets` unless it is there already (a step may run on a table that has it). */
function addTargetsColumn(sql: SqlStorage, name: string, type: string) {
  const cols = sql.exec<{ name: string }>("PRAGMA table_info(targets)").toArray();
  if (!cols.some((c) => c.name === name)) sql.exec(`ALTER TABLE targets ADD COLUMN ${name} ${type}`);
}

const FORMAT_STEPS: readonly FormatStep[] = [
  {
    to: 1,
    description: "targets (one row per pass and server) and the event log",
    apply(sql) {
      sql.exec(`CREATE TABLE IF NOT EXISTS targets (
        pass INTEGER NOT NULL, server_id TEXT NOT NULL, seq INTEGER NOT NULL, hostname TEXT NOT NULL,
        reboot_group TEXT NOT NULL, state TEXT NOT NULL, image TEXT NOT NULL, version TEXT NOT NULL,
        from_image TEXT, from_version TEXT, generation INTEGER, slot TEXT NOT NULL DEFAULT 'none',
        started_at INTEGER, ended_at INTEGER, duration_ms INTEGER, reason TEXT, warned INTEGER NOT NULL DEFAULT 0,
        not_before INTEGER NOT NULL DEFAULT 0, dirty INTEGER NOT NULL DEFAULT 1,
        PRIMARY KEY (pass, server_id))`);
      sql.exec("CREATE INDEX IF NOT EXISTS targets_state ON targets (pass, state, seq)");
      sql.exec("CREATE INDEX IF NOT EXISTS targets_seq ON targets (pass, seq)");
      sql.exec("CREATE INDEX IF NOT EXISTS targets_duration ON targets (pass, state, duration_ms)");
      sql.exec("CREATE INDEX IF NOT EXISTS targets_started ON targets (pass, state, warned, started_at)");
      sql.exec("CREATE INDEX IF NOT EXISTS targets_dirty ON targets (dirty) WHERE dirty > 0");
      sql.exec(`CREATE TABLE IF NOT EXISTS events (
        id INTEGER PRIMARY KEY AUTOINCREMENT, at INTEGER NOT NULL, kind TEXT NOT NULL,
        server_id TEXT, details TEXT)`);
      sql.exec("CREATE INDEX IF NOT EXISTS events_kind ON events (kind, id)");
    },
  },
  {
    to: 2,
    description:
      "Targets waiting out a refused reboot slot are found by an index: the slot retry timer, every few " +
      "seconds while slots are refused, read every target of the rollout to find them",
    apply(sql) {
      sql.exec("CREATE INDEX IF NOT EXISTS targets_waiting ON targets (not_before) WHERE not_before > 0");
    },
  },
  {
    to: 3,
    description:
      "A strategy's plan: each target's phase (0 for every target of a rollout without a strategy, which " +
      "is one wave) and the analysis samples (one row per check and sample: value, threshold, time)",
    apply(sql) {
      addTargetsColumn(sql, "phase", "INTEGER NOT NULL DEFAULT 0");
      sql.exec("CREATE INDEX IF NOT EXISTS targets_phase ON targets (pass, phase, state)");
      sql.exec(`CREATE TABLE IF NOT EXISTS samples (
        id INTEGER PRIMARY KEY AUTOINCREMENT, phase INTEGER NOT NULL, seq INTEGER NOT NULL,
        check_index INTEGER NOT NULL, name TEXT NOT NULL, at INTEGER NOT NULL, ok INTEGER NOT NULL,
        value REAL, threshold REAL, detail TEXT NOT NULL)`);
    },
  },
  {
    to: 4,
    description:
      "Fewer rows written per target: an index entry is written for every index whose columns a write " +
      "names, so indexes that every state change rewrote and few reads use give way to partial ones " +
      "(targets applying not yet warned about; targets of a strategy's phases still open; slow-server " +
      "warnings), the durations' index goes (read once per wake), and an event log with no event yet " +
      "is made again without AUTOINCREMENT, whose sqlite_sequence row every event rewrote (its events " +
      "are never deleted, so ids still only grow)",
    apply(sql) {
      sql.exec("DROP INDEX IF EXISTS targets_duration");
      sql.exec("DROP INDEX IF EXISTS targets_started");
      sql.exec(
        "CREATE INDEX IF NOT EXISTS targets_unwarned ON targets (pass, started_at) WHERE state = 'applying' AND warned = 0",
      );
      sql.exec("DROP INDEX IF EXISTS targets_phase");
      sql.exec(
        "CREATE INDEX IF NOT EXISTS targets_open_phase ON targets (phase) WHERE pass = 0 AND state IN ('queued', 'waiting_budget', 'applying')",
      );
      const empty = sql.exec("SELECT 1 FROM events LIMIT 1").toArray().length === 0;
      if (empty) {
        sql.exec("DROP TABLE events");
        sql.exec(`CREATE TABLE events (
          id INTEGER PRIMARY KEY, at INTEGER NOT NULL, kind TEXT NOT NULL, server_id TEXT, details TEXT)`);
      }
      sql.exec("DROP INDEX IF EXISTS events_kind");
      sql.exec("CREATE INDEX IF NOT EXISTS events_slow ON events (id) WHERE kind = 'warning.slow_server'");
    },
  },
  {
    to: 5,
    description:
      "A rollback target may be a server that took the rollout's image from the fleet's channel, no " +
      "target of the forward pass (via_channel): its write goes back only while the channel's image stands",
    apply(sql) {
      addTargetsColumn(sql, "via_channel", "INTEGER NOT NULL DEFAULT 0");
    },
  },
];

/** The format storage is in: stamped, or (unstamped) 1 when it holds a rollout, 0 when it never did. */
export function storedFormat(kv: SyncKvStorage): number {
  return kv.get<number>(FORMAT_KEY) ?? (kv.get("spec") === undefined ? 0 : 1);
}

/**
 * Brings the storage from `from` to `newest`, steps and stamp in the caller's transaction. Storage
 * from newer code is refused rather than guessed at. Returns the steps applied.
 */
export function upgradeRolloutStorage(storage: DurableObjectStorage, from: number): number[] {
  if (from > ROLLOUT_FORMAT) {
    throw new Error(
      `rollout storage is in format ${from}, newer than this code's ${ROLLOUT_FORMAT}; refusing to read it`,
    );
  }
  const applied = FORMAT_STEPS.filter((s) => s.to > from);
  for (const step of applied) step.apply(storage.sql);
  storage.kv.put(FORMAT_KEY, ROLLOUT_FORMAT);
  return applied.map((s) => s.to);
}
