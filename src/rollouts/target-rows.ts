/**
 * The targets table of a Rollout object: one row per pass and server, in the format of
 * storage-format.ts. Rows hold what machine.ts's Target holds, plus what only storage needs: the
 * duration of a done target, when a refused slot may be asked for again (not_before) and how many
 * changes the index has not taken yet (dirty).
 */
import type { Target, TargetState } from "./machine";

type Row = Omit<Target, "warned" | "via_channel"> & {
  warned: number;
  via_channel: number;
  duration_ms: number | null;
  dirty: number;
  not_before: number;
};

const COLS =
  "pass, server_id, seq, hostname, reboot_group, state, image, version, from_image, from_version, generation, slot, started_at, ended_at, reason, warned, via_channel";

/** The columns a transition may change (machine.ts's stepTarget), in the order they are set. */
const CHANGING = [
  "state",
  "generation",
  "from_image",
  "from_version",
  "slot",
  "started_at",
  "ended_at",
  "reason",
] as const satisfies readonly (keyof Target)[];

const toTarget = (r: Row): Target => ({ ...r, warned: r.warned === 1, via_channel: r.via_channel === 1 });

/** A first-pass target as the rollout starts with it. */
export interface NewTarget {
  server_id: string;
  hostname: string;
  reboot_group: string;
  state: TargetState;
  ended_at: number | null;
  reason: string | null;
  /** The phase of the strategy's plan that releases it (0 without a strategy). */
  phase?: number;
}

/** A target change the index has not taken yet (`dirty` counts the changes). */
export type DirtyTarget = Target & { dirty: number };

export class TargetRows {
  /**
   * Each phase's first hostnames in the first pass, by `phases(shown)`: fixed once the first pass
   * is inserted (a target never changes phase, hostname or seq), so read once per object's life.
   */
  private firstHostnames: { shown: number; byPhase: Map<number, string[]> } | null = null;

  constructor(private readonly sql: SqlStorage) {}

  /** What is kept in memory no longer says what storage holds (a turn was undone). */
  forget() {
    this.firstHostnames = null;
  }

  /**
   * The first pass, `seq` in the order given. Not marked for the index (`dirty` 0): the index
   * takes the first pass in seq order (`fromSeq`, the store's `indexFrom`), which saves each
   * target its mark's index entry and the write that clears it.
   */
  insertFirstPass(image: string, version: string, targets: NewTarget[]) {
    this.firstHostnames = null;
    targets.forEach((t, i) => {
      this.sql.exec(
        `INSERT INTO targets (pass, server_id, seq, hostname, reboot_group, state, image, version, ended_at, reason, phase, dirty)
         VALUES (0, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 0)`,
        t.server_id,
        i,
        t.hostname,
        t.reboot_group,
        t.state,
        image,
        version,
        t.ended_at,
        t.reason,
        t.phase ?? 0,
      );
    });
  }

  get(pass: number, serverId: string): Target | null {
    const r = this.sql
      .exec<Row>(`SELECT ${COLS} FROM targets WHERE pass = ? AND server_id = ?`, pass, serverId)
      .toArray()[0];
    return r ? toTarget(r) : null;
  }

  /**
   * The target an operator names by server id or hostname: the one of the latest pass still in
   * flight, else the latest one.
   */
  find(server: string): Target | null {
    const r = this.sql
      .exec<Row>(
        `SELECT ${COLS} FROM targets WHERE server_id = ? OR hostname = ?
         ORDER BY state IN ('queued', 'waiting_budget', 'applying') DESC, pass DESC LIMIT 1`,
        server,
        server.toLowerCase(),
      )
      .toArray()[0];
    return r ? toTarget(r) : null;
  }

  /**
   * A target's new state (`before` as stored, `after` as it is now); `project` marks it for the
   * index. Only the columns that changed are named: each index whose columns a write names is
   * written an entry, changed or not, so a write of every column cost an entry in every index.
   * `duration_ms` goes with a change of state, the only time it can change.
   */
  write(before: Target, after: Target, durationMs: number | null, project: boolean) {
    const set: string[] = [];
    const values: unknown[] = [];
    for (const col of CHANGING) {
      if (before[col] === after[col]) continue;
      set.push(`${col} = ?`);
      values.push(after[col]);
    }
    if (before.state !== after.state) {
      set.push("duration_ms = ?");
      values.push(durationMs);
    }
    if (project) set.push("dirty = dirty + 1");
    if (set.length === 0) return;
    this.sql.exec(
      `UPDATE targets SET ${set.join(", ")} WHERE pass = ? AND server_id = ?`,
      ...values,
      after.pass,
      after.server_id,
    );
  }

  /**
   * Queued (and budget-waiting) targets of a pass become skipped: how many queued, how many of them
   * had asked for a slot, and how many were waiting for budget.
   */
  skipQueued(pass: number, reason: string, now: number): { n: number; req: number; waiting: number } {
    const counted = this.sql
      .exec<{ n: number; req: number; waiting: number }>(
        `SELECT COALESCE(SUM(state = 'queued'), 0) AS n, COALESCE(SUM(slot = 'requested'), 0) AS req,
           COALESCE(SUM(state = 'waiting_budget'), 0) AS waiting
         FROM targets WHERE pass = ? AND state IN ('queued', 'waiting_budget')`,
        pass,
      )
      .one();
    if (counted.n === 0 && counted.waiting === 0) return counted;
    this.sql.exec(
      `UPDATE targets SET state = 'skipped', reason = ?, ended_at = ?, slot = 'none', dirty = dirty + 1
       WHERE pass = ? AND state IN ('queued', 'waiting_budget')`,
      reason,
      now,
      pass,
    );
    return counted;
  }

  /** A queued target of the rollback `pass`, back to the image `t` had before; false when there is none. */
  addRollback(pass: number, t: Target): boolean {
    if (!t.from_image || !t.from_version) return false;
    this.sql.exec(
      `INSERT OR IGNORE INTO targets (pass, server_id, seq, hostname, reboot_group, state, image, version, slot)
       VALUES (?, ?, ?, ?, ?, 'queued', ?, ?, 'none')`,
      pass,
      t.server_id,
      t.seq,
      t.hostname,
      t.reboot_group,
      t.from_image,
      t.from_version,
    );
    return true;
  }

  /**
   * Queued targets of the rollback `pass` for servers that took the rollout's image from the
   * fleet's channel, going to `image`: after every target of every pass (a server already in it
   * keeps its target), and none for a server whose forward target still applies (should it end
   * done, it is rolled back as a target of the forward pass). How many were added.
   */
  addChannelRollback(
    pass: number,
    servers: { server_id: string; hostname: string; reboot_group: string }[],
    image: string,
    version: string,
  ): number {
    // Past every seq of every pass: a forward target that ends done later joins the pass with its
    // own seq, and pages run by seq.
    let seq = this.sql.exec<{ next: number }>("SELECT COALESCE(MAX(seq), -1) + 1 AS next FROM targets").one().next;
    let added = 0;
    for (const s of servers) {
      if (this.get(pass, s.server_id) || this.get(0, s.server_id)?.state === "applying") continue;
      this.sql.exec(
        `INSERT INTO targets (pass, server_id, seq, hostname, reboot_group, state, image, version, slot, via_channel)
         VALUES (?, ?, ?, ?, ?, 'queued', ?, ?, 'none', 1)`,
        pass,
        s.server_id,
        seq++,
        s.hostname,
        s.reboot_group,
        image,
        version,
      );
      added++;
    }
    return added;
  }

  done(pass: number): Target[] {
    return this.sql
      .exec<Row>(`SELECT ${COLS} FROM targets WHERE pass = ? AND state = 'done' ORDER BY seq`, pass)
      .toArray()
      .map(toTarget);
  }

  /**
   * The next `n` queued targets that may start now, in order; of phases up to `maxPhase` only.
   * Read through targets_state, in seq order, stopping at `n` (`+phase` keeps the planner off
   * any index of phases, whose range would read every target of the pass and sort them, on every
   * turn that starts one).
   */
  nextQueued(pass: number, now: number, n: number, maxPhase = Number.MAX_SAFE_INTEGER): Target[] {
    return this.sql
      .exec<Row>(
        `SELECT ${COLS} FROM targets WHERE pass = ? AND state = 'queued' AND slot = 'none' AND not_before <= ? AND +phase <= ? ORDER BY seq LIMIT ?`,
        pass,
        now,
        maxPhase,
        n,
      )
      .toArray()
      .map(toTarget);
  }

  /** When the earliest target waiting out a slot refusal may ask again, or null. */
  nextSlotRetry(pass: number, now: number): number | null {
    return this.sql
      .exec<{ at: number | null }>(
        "SELECT MIN(not_before) AS at FROM targets WHERE pass = ? AND state = 'queued' AND not_before > ?",
        pass,
        now,
      )
      .one().at;
  }

  deferSlot(pass: number, serverId: string, until: number) {
    this.sql.exec("UPDATE targets SET not_before = ? WHERE pass = ? AND server_id = ?", until, pass, serverId);
  }

  /** The targets of a pass waiting for the fleet's disruption budget, in order. */
  waitingBudget(pass: number): Target[] {
    return this.sql
      .exec<Row>(`SELECT ${COLS} FROM targets WHERE pass = ? AND state = 'waiting_budget' ORDER BY seq`, pass)
      .toArray()
      .map(toTarget);
  }

  /** Every target waiting out a slot refusal may ask again. */
  endSlotWaits() {
    this.sql.exec("UPDATE targets SET not_before = 0 WHERE not_before > 0");
  }

  applying(): { pass: number; server_id: string; started_at: number }[] {
    return this.sql
      .exec<{ pass: number; server_id: string; started_at: number }>(
        "SELECT pass, server_id, started_at FROM targets WHERE state = 'applying'",
      )
      .toArray();
  }

  /** Targets of a page: `limit + 1` rows, so the caller knows whether more follow. */
  page(
    pass: number,
    state: TargetState | undefined,
    after: number,
    limit: number,
  ): (Target & { duration_ms: number | null })[] {
    // Two statements rather than "(? IS NULL OR state = ?)", so each uses its index.
    const rows = state
      ? this.sql.exec<Row>(
          `SELECT ${COLS}, duration_ms FROM targets WHERE pass = ? AND state = ? AND seq > ? ORDER BY seq LIMIT ?`,
          pass,
          state,
          after,
          limit + 1,
        )
      : this.sql.exec<Row>(
          `SELECT ${COLS}, duration_ms FROM targets WHERE pass = ? AND seq > ? ORDER BY seq LIMIT ?`,
          pass,
          after,
          limit + 1,
        );
    return rows.toArray().map((r) => ({ ...toTarget(r), duration_ms: r.duration_ms }));
  }

  // ---- the strategy's phases ----

  /** Forward targets of a phase still queued, waiting for the disruption budget, or applying. */
  openInPhase(phase: number): number {
    return this.sql
      .exec<{ n: number }>(
        "SELECT COUNT(*) AS n FROM targets WHERE pass = 0 AND phase = ? AND state IN ('queued', 'waiting_budget', 'applying')",
        phase,
      )
      .one().n;
  }

  /** Forward targets of the phases before `phase`, with their states: what an analysis looks at. */
  releasedBefore(phase: number): { server_id: string; hostname: string; state: TargetState }[] {
    return this.sql
      .exec<{ server_id: string; hostname: string; state: TargetState }>(
        "SELECT server_id, hostname, state FROM targets WHERE pass = 0 AND phase < ? AND state != 'skipped' ORDER BY seq",
        phase,
      )
      .toArray();
  }

  /** Per phase: its forward targets' counts by state and the first `shown` hostnames. */
  phases(shown: number): Map<number, { counts: Partial<Record<TargetState, number>>; hostnames: string[] }> {
    const out = new Map<number, { counts: Partial<Record<TargetState, number>>; hostnames: string[] }>();
    const rows = this.sql
      .exec<{
        phase: number;
        state: TargetState;
        n: number;
      }>("SELECT phase, state, COUNT(*) AS n FROM targets WHERE pass = 0 GROUP BY phase, state")
      .toArray();
    for (const r of rows) {
      const e = out.get(r.phase) ?? { counts: {}, hostnames: [] };
      e.counts[r.state] = r.n;
      out.set(r.phase, e);
    }
    const hostnames = this.hostnamesByPhase(shown);
    for (const [phase, e] of out) e.hostnames = hostnames.get(phase) ?? [];
    return out;
  }

  /** Each phase's first `shown` hostnames of the first pass, in one statement, once. */
  private hostnamesByPhase(shown: number): Map<number, string[]> {
    if (this.firstHostnames?.shown === shown) return this.firstHostnames.byPhase;
    const byPhase = new Map<number, string[]>();
    const rows = this.sql
      .exec<{ phase: number; hostname: string }>(
        `SELECT phase, hostname FROM (
           SELECT phase, hostname, seq, row_number() OVER (PARTITION BY phase ORDER BY seq) AS k FROM targets WHERE pass = 0
         ) WHERE k <= ? ORDER BY phase, seq`,
        shown,
      )
      .toArray();
    for (const r of rows) byPhase.set(r.phase, [...(byPhase.get(r.phase) ?? []), r.hostname]);
    this.firstHostnames = { shown, byPhase };
    return byPhase;
  }

  // ---- slow servers ----

  markWarned(t: Target) {
    this.sql.exec("UPDATE targets SET warned = 1 WHERE pass = ? AND server_id = ?", t.pass, t.server_id);
  }

  /** When the oldest applying target of the pass not yet warned about started, or null. */
  oldestUnwarned(pass: number): number | null {
    return this.sql
      .exec<{ at: number | null }>(
        "SELECT MIN(started_at) AS at FROM targets WHERE pass = ? AND state = 'applying' AND warned = 0",
        pass,
      )
      .one().at;
  }

  /** Applying targets of the pass, not yet warned about, that started before `before`; oldest first. */
  unwarnedSince(pass: number, before: number): Target[] {
    return this.sql
      .exec<Row>(
        `SELECT ${COLS} FROM targets WHERE pass = ? AND state = 'applying' AND warned = 0 AND started_at < ? ORDER BY started_at LIMIT 100`,
        pass,
        before,
      )
      .toArray()
      .map(toTarget);
  }

  /** Durations of the pass's done targets, ascending. */
  doneDurations(pass: number): number[] {
    return this.sql
      .exec<{ d: number }>(
        "SELECT duration_ms AS d FROM targets WHERE pass = ? AND state = 'done' ORDER BY duration_ms",
        pass,
      )
      .toArray()
      .map((r) => r.d);
  }

  // ---- the index ----

  /** First-pass targets from `seq` on, in order, at most `limit` (through targets_seq). */
  fromSeq(seq: number, limit: number): DirtyTarget[] {
    return this.sql
      .exec<Row>(`SELECT ${COLS}, dirty FROM targets WHERE pass = 0 AND seq >= ? ORDER BY seq LIMIT ?`, seq, limit)
      .toArray()
      .map((r) => ({ ...toTarget(r), dirty: r.dirty }));
  }

  /** Target changes the index has not taken, at most `limit`. */
  dirty(limit: number): DirtyTarget[] {
    return this.sql
      .exec<Row>(`SELECT ${COLS}, dirty FROM targets WHERE dirty > 0 LIMIT ?`, limit)
      .toArray()
      .map((r) => ({ ...toTarget(r), dirty: r.dirty }));
  }

  /** The index took these changes; a target changed again meanwhile stays dirty. */
  projected(rows: { pass: number; server_id: string; dirty: number }[]) {
    for (const r of rows) {
      this.sql.exec(
        "UPDATE targets SET dirty = 0 WHERE pass = ? AND server_id = ? AND dirty = ?",
        r.pass,
        r.server_id,
        r.dirty,
      );
    }
  }
}
