import { describe, expect, it } from "vitest";
import { CRON_RUNS_A_MONTH, monthOf, type ClassReading, type Reading, type Window } from "../scripts/bench/month";
import { MONTH_S } from "../scripts/bench/prices";

// The cost bench's arithmetic (scripts/bench/month.ts): what scales with the hosts, what a
// deployment pays once, and what a window's readings come to in a month.
const rows = (read = 0, written = 0) => ({
  statements: read || written ? 1 : 0,
  rows_read: read,
  rows_written: written,
});
const ledgers = (over: Partial<ClassReading> = {}): ClassReading => ({
  requests: 0,
  rpc: 0,
  fetch: 0,
  alarm: 0,
  ws_messages: 0,
  ws_events: 0,
  awake_ms: 0,
  idle_tail_ms: 0,
  instances: 0,
  d1: rows(),
  storage: { rows_read: 0, rows_written: 0, alarms_set: 0, stored_bytes: 0 },
  methods: {},
  ...over,
});
function window(name: string, s: number, over: { cron?: [number, number, number]; ledger?: Partial<ClassReading> }) {
  const [scheduled, read, written] = over.cron ?? [0, 0, 0];
  const reading: Reading = {
    window: { ms: s * 1000 },
    worker: { requests: 0, write_requests: 0, scheduled, d1: rows(), cron_d1: rows(read, written), cron_pending: 0 },
    logs: { lines: scheduled, access_lines: 0, cron_lines: scheduled },
    objects: { ServerLedger: ledgers(over.ledger) },
    d1_unattributed: rows(),
    d1_rows_metered: true,
    d1_stored_bytes: 0,
  };
  return { name, s, reading, cpuMs: null, idleCpuMs: 0 } satisfies Window;
}
const logging = { enabled: false, headSamplingRate: 1, invocationLogs: false, accessLog: "off" } as const;
/** 150 channel hosts for a minute: a report each (1/20 of a request), and one cron tick. */
const steady = (cron: [number, number, number]) =>
  window("steady", 60, {
    cron,
    ledger: { requests: 7.5, ws_messages: 150, instances: 150, d1: rows(0, 0), storage: { ...ledgers().storage } },
  });
const events = window("events", 120, { cron: [2, 2_000, 8], ledger: { requests: 200, d1: rows(300, 600) } });
/** The month's bill in rows written at `n` hosts: the hosts' rate times n, plus the deployment's. */
const writtenAt = (m: ReturnType<typeof monthOf>, n: number) => m.monthly.d1RowsWritten * n + m.fixed.d1RowsWritten;

describe("the cost bench's month", () => {
  it("counts the cron's D1 rows once per deployment, a tick's rows times a month's ticks, never per host", () => {
    const m = monthOf({ events, steady: steady([1, 30, 4]), hosts: 150, rounds: 4, logging });
    expect(m.fixed.d1RowsWritten).toBe(4 * CRON_RUNS_A_MONTH);
    expect(m.fixed.d1RowsRead).toBe(30 * CRON_RUNS_A_MONTH);
    expect(m.fixed.workerRequests).toBe(CRON_RUNS_A_MONTH);
    // The hosts wrote no D1 row in the steady window: a host-month's are the events' only.
    expect(m.perHostMonth.d1RowsWritten).toBe(0);
    expect(m.monthly.d1RowsWritten).toBe((4 * 600) / 150);
    // The same deployment measured with a third of the hosts bills the same cron.
    const fewer = monthOf({ events, steady: steady([1, 30, 4]), hosts: 50, rounds: 4, logging });
    expect(fewer.fixed).toEqual(m.fixed);
    expect(writtenAt(m, 100_000) - writtenAt(m, 10_000)).toBe(90_000 * m.monthly.d1RowsWritten);
  });

  it("leaves the cron's ticks of the events window (an audit drain, a rollup) out of the hosts' rounds", () => {
    const quiet = monthOf({ events, steady: steady([1, 30, 0]), hosts: 150, rounds: 1, logging });
    // The events window's objects wrote 600 rows less the steady rate (none): 4 a host per round.
    expect(quiet.perHostRound.d1RowsWritten).toBe(4);
    expect(quiet.perHostRound.d1RowsRead).toBe(2);
    expect(quiet.fixed.d1RowsWritten).toBe(0);
  });

  it("adds what a window cannot see once, and scales the steady window's rate to a month per host", () => {
    const periodic = { d1RowsRead: 34_560, d1RowsWritten: 57.6 };
    const m = monthOf({ events, steady: steady([1, 30, 0]), hosts: 150, rounds: 4, periodic, logging });
    const without = monthOf({ events, steady: steady([1, 30, 0]), hosts: 150, rounds: 4, logging });
    expect(m.monthly.d1RowsRead - without.monthly.d1RowsRead).toBe(34_560);
    expect(m.monthly.d1RowsWritten - without.monthly.d1RowsWritten).toBeCloseTo(57.6, 9);
    // 7.5 requests a minute for 150 hosts: 1/20 a host a minute.
    expect(m.perHostMonth.doRequests).toBeCloseTo(MONTH_S / 60 / 20, 6);
  });
});
