/**
 * A Rollout object's analysis samples, in the format of storage-format.ts: one row per check and
 * sample (its value, its threshold, when, and whether it held), read by the summary's
 * blocked_by, the API (GET /v1/rollouts/{id}) and the rollout page's chart. The newest ones a
 * summary shows are read once per object's life and then kept by their one writer, `add`: a
 * summary (every GET, every long poll's wake) reads no sample row again.
 */
import type { CheckResult } from "./strategy";

export interface SampleRow {
  phase: number;
  seq: number;
  check: number;
  name: string;
  at: number;
  ok: boolean;
  value: number | null;
  threshold: number | null;
  detail: string;
}

/** Samples a summary carries (the newest); older ones stay stored. */
const SAMPLES_SHOWN = 500;

export class Samples {
  /** The newest SAMPLES_SHOWN rows, oldest first, once read; null until then (or after a refused turn). */
  private shown: SampleRow[] | null = null;

  constructor(private readonly sql: SqlStorage) {}

  /** The rows kept in memory no longer say what storage holds (the turn that added them was undone). */
  forget() {
    this.shown = null;
  }

  add(phase: number, seq: number, at: number, results: (CheckResult & { name: string })[]) {
    for (const r of results)
      this.sql.exec(
        `INSERT INTO samples (phase, seq, check_index, name, at, ok, value, threshold, detail)
         VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)`,
        phase,
        seq,
        r.check,
        r.name,
        at,
        r.ok ? 1 : 0,
        r.value,
        r.threshold,
        r.detail,
      );
    if (!this.shown) return;
    for (const r of results)
      this.shown.push({
        phase,
        seq,
        check: r.check,
        name: r.name,
        at,
        ok: r.ok,
        value: r.value,
        threshold: r.threshold,
        detail: r.detail,
      });
    if (this.shown.length > SAMPLES_SHOWN) this.shown.splice(0, this.shown.length - SAMPLES_SHOWN);
  }

  /** The newest samples a summary shows, oldest first (a copy: callers may keep it). */
  recent(): SampleRow[] {
    this.shown ??= this.read(SAMPLES_SHOWN);
    return [...this.shown];
  }

  private read(limit: number): SampleRow[] {
    return this.sql
      .exec<{
        phase: number;
        seq: number;
        check_index: number;
        name: string;
        at: number;
        ok: number;
        value: number | null;
        threshold: number | null;
        detail: string;
      }>(
        "SELECT * FROM (SELECT phase, seq, check_index, name, at, ok, value, threshold, detail, id FROM samples ORDER BY id DESC LIMIT ?) ORDER BY id",
        limit,
      )
      .toArray()
      .map((r) => ({
        phase: r.phase,
        seq: r.seq,
        check: r.check_index,
        name: r.name,
        at: r.at,
        ok: r.ok === 1,
        value: r.value,
        threshold: r.threshold,
        detail: r.detail,
      }));
  }
}
