/**
 * A Rollout object's analysis samples, in the format of storage-format.ts: one row per check and
 * sample (its value, its threshold, when, and whether it held), read by the summary's
 * blocked_by, the API (GET /v1/rollouts/{id}) and the rollout page's chart.
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
  constructor(private readonly sql: SqlStorage) {}

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
  }

  /** The newest samples, oldest first. */
  recent(limit = SAMPLES_SHOWN): SampleRow[] {
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
