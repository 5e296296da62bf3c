// The arithmetic of the cost bill (./bill.ts): the local meter's readings (src/local/meter.ts) in
// windows, turned into usage per host-month and per deployment-month. Pure (no file, no clock), so
// test/bill-month.test.ts can pin it: what scales with the hosts and what a deployment pays once.
import { DO_GB, MONTH_S } from "./prices.ts";

/** What a deployment writes to Workers Logs (./logging.ts reads it from wrangler.toml). */
export interface Logging {
  enabled: boolean;
  headSamplingRate: number;
  invocationLogs: boolean;
  /** ACCESS_LOG of [vars]: "on" a line per request, "writes" per request not GET/HEAD or answered 5xx, else none. */
  accessLog: "on" | "writes" | "off";
}

interface Rows {
  statements: number;
  rows_read: number;
  rows_written: number;
}
export interface ClassReading {
  requests: number;
  rpc: number;
  fetch: number;
  alarm: number;
  ws_messages: number;
  ws_events: number;
  awake_ms: number;
  idle_tail_ms: number;
  instances: number;
  d1: Rows;
  storage: { rows_read: number; rows_written: number; alarms_set: number; stored_bytes: number };
  methods: Record<string, { calls: number; ms: number }>;
}
export interface Reading {
  window: { ms: number };
  /** `d1` the Worker's fetches' rows, `cron_d1` its cron runs' (counted apart by the meter). */
  worker: {
    requests: number;
    write_requests: number;
    scheduled: number;
    d1: Rows;
    cron_d1: Rows;
    /** The cron's handlers and waitUntil work not settled yet. */
    cron_pending: number;
  };
  logs: { lines: number; access_lines: number; cron_lines: number };
  objects: Record<string, ClassReading>;
  d1_unattributed: Rows;
  d1_rows_metered: boolean;
  d1_stored_bytes: number;
}
export interface Window {
  name: string;
  s: number;
  reading: Reading;
  cpuMs: number | null;
  idleCpuMs: number;
}

export const ITEMS = [
  "workerRequests",
  "workerCpuMs",
  "doRequests",
  "doGbSeconds",
  "doRowsRead",
  "doRowsWritten",
  "doStoredGbMonth",
  "d1RowsRead",
  "d1RowsWritten",
  "d1StoredGbMonth",
  "logEvents",
] as const;
export type Item = (typeof ITEMS)[number];
/**
 * Per window or per host-month: the billed items, and what the log events are made of, so the bill
 * can price other logging settings than the deployed one (invocations: each writes an execution
 * log where invocation logs are on; the access log's lines with ACCESS_LOG "on" and "writes"; the
 * other console lines, errors and warnings, always written).
 */
export type Usage = Record<Item, number> & {
  doGbSecondsTail: number;
  invocations: number;
  accessLines: number;
  writeLines: number;
  otherLines: number;
  alarmsSet: number;
};

/** The cron's ticks in a month: once a minute, as wrangler.toml deploys it. */
export const CRON_RUNS_A_MONTH = MONTH_S / 60;

/** The log events of `u` with logging `l`: execution logs (if on) and console lines, sampled. */
export function logEventsOf(u: Pick<Usage, "invocations" | "accessLines" | "writeLines" | "otherLines">, l: Logging) {
  if (!l.enabled) return 0;
  const access = l.accessLog === "on" ? u.accessLines : l.accessLog === "writes" ? u.writeLines : 0;
  return l.headSamplingRate * ((l.invocationLogs ? u.invocations : 0) + access + u.otherLines);
}

/**
 * What the hosts used in a window. The cron's runs are left out, their D1 rows included: a
 * deployment runs it once a minute whatever its size, so it is billed once (`cronOf`), not scaled
 * with the hosts. What the cron asked of objects (a coordinator handed audit rows) stays in the
 * objects' figures: it follows the fleet's changes, which a steady window has none of.
 */
export function usageOf(w: Window, logging: Logging): Usage {
  const r = w.reading;
  const classes = Object.values(r.objects);
  const rows = [r.worker.d1, r.d1_unattributed, ...classes.map((c) => c.d1)];
  const sum = (f: (c: ClassReading) => number) => classes.reduce((n, c) => n + f(c), 0);
  const workerRequests = r.worker.requests;
  const doRequests = sum((c) => c.requests);
  const parts = {
    invocations: workerRequests + sum((c) => c.rpc + c.fetch + c.alarm + c.ws_messages + c.ws_events),
    accessLines: workerRequests,
    writeLines: r.worker.write_requests,
    otherLines: Math.max(0, r.logs.lines - r.logs.access_lines - r.logs.cron_lines),
  };
  return {
    ...parts,
    alarmsSet: sum((c) => c.storage?.alarms_set ?? 0),
    logEvents: logEventsOf(parts, logging),
    // Stored data is not a rate: the bill adds it from the run's growth (report's `stored`).
    doStoredGbMonth: 0,
    d1StoredGbMonth: 0,
    workerRequests,
    workerCpuMs: cpuShare(w, workerRequests),
    doRequests,
    doGbSeconds: (sum((c) => c.awake_ms) / 1000) * DO_GB,
    doGbSecondsTail: (sum((c) => c.awake_ms + c.idle_tail_ms) / 1000) * DO_GB,
    d1RowsRead: rows.reduce((n, x) => n + x.rows_read, 0),
    d1RowsWritten: rows.reduce((n, x) => n + x.rows_written, 0),
    doRowsRead: sum((c) => c.storage?.rows_read ?? 0),
    doRowsWritten: sum((c) => c.storage?.rows_written ?? 0),
  };
}

/**
 * The runtime's busy CPU in a window, shared between the Worker's invocations and the objects'
 * requests in proportion to their counts; this many of the Worker's invocations' share.
 */
function cpuShare(w: Window, invocations: number) {
  const r = w.reading;
  const all = r.worker.requests + r.worker.scheduled + Object.values(r.objects).reduce((n, c) => n + c.requests, 0);
  return all ? (Math.max(0, (w.cpuMs ?? 0) - w.idleCpuMs) * invocations) / all : 0;
}

/** The lines each cron run writes (its one `scheduled` line, and any warning). */
export const cronLinesPerRun = (w: Window) =>
  w.reading.worker.scheduled ? w.reading.logs.cron_lines / w.reading.worker.scheduled : 1;

export const zeroItems = () => Object.fromEntries(ITEMS.map((i) => [i, 0])) as Record<Item, number>;

/**
 * The cron, once a minute as deployed, per deployment-month: its invocations, their CPU (the
 * estimate's share) and the D1 rows a run of `w` read and wrote, each per run times the month's
 * runs. `w` is a window whose ticks are a quiet deployment's (the steady window): a tick that
 * hands on a burst of audit rows or rolls a period's history up is the fleet's change, not the
 * cron's rate (the history's rollup is added once a period, by arithmetic).
 */
function cronOf(w: Window, logging: Logging): Record<Item, number> {
  const { scheduled, cron_d1 } = w.reading.worker;
  const perRun = (n: number) => (scheduled ? n / scheduled : 0);
  const logEvents =
    CRON_RUNS_A_MONTH *
    logEventsOf({ invocations: 1, accessLines: 0, writeLines: 0, otherLines: cronLinesPerRun(w) }, logging);
  return {
    ...zeroItems(),
    workerRequests: CRON_RUNS_A_MONTH,
    workerCpuMs: CRON_RUNS_A_MONTH * perRun(cpuShare(w, scheduled)),
    d1RowsRead: CRON_RUNS_A_MONTH * perRun(cron_d1.rows_read),
    d1RowsWritten: CRON_RUNS_A_MONTH * perRun(cron_d1.rows_written),
    logEvents,
  };
}

const combine = (a: Usage, b: Usage, k = 1) =>
  Object.fromEntries(Object.keys(a).map((key) => [key, a[key as keyof Usage] + k * b[key as keyof Usage]])) as Usage;
const scale = (a: Usage, k: number) => combine(a, a, k - 1);
const clamp = (a: Usage) => Object.fromEntries(Object.entries(a).map(([k, v]) => [k, Math.max(0, v)])) as Usage;

/**
 * The month of one transport's run: per host, the steady window's rate over 30 days plus `rounds`
 * rounds of events (the events window less the steady rate over its length) plus what a window
 * cannot see (`periodic`, already per host-month); per deployment, the cron (`cronOf`). A fleet of
 * N hosts uses `monthly × N + fixed`.
 */
export function monthOf(r: {
  events: Window;
  steady: Window;
  hosts: number;
  rounds: number;
  periodic?: Partial<Usage>;
  logging: Logging;
}) {
  const steady = usageOf(r.steady, r.logging);
  const perHostMonth = scale(steady, MONTH_S / r.steady.s / r.hosts);
  const perHostRound = scale(
    clamp(combine(usageOf(r.events, r.logging), steady, -r.events.s / r.steady.s)),
    1 / r.hosts,
  );
  const periodic = { ...scale(perHostRound, 0), ...r.periodic } as Usage;
  periodic.logEvents += logEventsOf(
    { invocations: 0, accessLines: 0, writeLines: 0, otherLines: 0, ...r.periodic },
    r.logging,
  );
  const monthly = combine(combine(perHostMonth, perHostRound, r.rounds), periodic);
  return { steady, perHostMonth, perHostRound, monthly, fixed: cronOf(r.steady, r.logging) };
}
