/**
 * The history's answer from its rows (pure): step series that start at the window's opening (the
 * row before it, moved to `since`), each version's spread and its time to 95 %, reboots and
 * rollouts per UTC day; and the same as CSV.
 */
import { SERVER_STATUSES } from "../domain/enums";
import { iso } from "../lib/time";
import { PERIOD_MS, RETENTION_MS, type AgentVersions } from "./rollup";
import type { FleetHistory, HistoryMetric, TimeTo95State } from "./schemas";
import type { HistoryRow } from "./store";

const DAY_MS = 86_400_000;
/** A version has spread once this share of the agent's servers reports it. */
const SPREAD_SHARE = 0.95;

export interface ShapeOptions {
  fleet: string;
  since: number;
  until: number;
  metrics: HistoryMetric[];
  agent?: string;
}

const dayOf = (ms: number) => iso(ms).slice(0, 10);

function perDay(rows: HistoryRow[], since: number, until: number, pick: (r: HistoryRow) => number) {
  const days = new Map<string, number>();
  for (let d = since - (since % DAY_MS); d <= until; d += DAY_MS) days.set(dayOf(d), 0);
  for (const r of rows) if (r.at >= since) days.set(dayOf(r.at), (days.get(dayOf(r.at)) ?? 0) + pick(r));
  return [...days].map(([day, count]) => ({ day, count }));
}

/**
 * Why a version's time to 95 % is or is not a figure: measured inside the window, or it started
 * spreading before the window opened (its start is not in the rows), or it has not reached 95 %.
 */
export function timeTo95State(firstInWindow: boolean, firstBefore: boolean, reached: boolean): TimeTo95State {
  if (!reached) return "not_reached";
  if (firstInWindow) return "measured";
  return firstBefore ? "before_window" : "not_reached";
}

function agentHistory(agent: string, rows: HistoryRow[], since: number) {
  const points = rows.map((r) => {
    const v: AgentVersions = r.versions[agent] ?? { versions: {}, none: 0, other: 0 };
    const total = Object.values(v.versions).reduce((a, b) => a + b, 0) + v.none + v.other;
    return { at: iso(Math.max(r.at, since)), total, versions: v.versions, not_reported: v.none, other: v.other };
  });
  const names = new Set(points.flatMap((p) => Object.keys(p.versions)));
  const spread = [...names].map((version) => {
    let first: number | null = null;
    let before = false;
    let reached: number | null = null;
    let reachedBefore = false;
    let peak = 0;
    rows.forEach((r, i) => {
      const n = points[i].versions[version] ?? 0;
      const share = points[i].total > 0 ? n / points[i].total : 0;
      peak = Math.max(peak, share);
      if (n > 0 && first === null && !before) {
        if (r.at < since) before = true;
        else first = r.at;
      }
      if (share >= SPREAD_SHARE && reached === null) {
        if (r.at >= since) reached = r.at;
        else reachedBefore = true;
      }
    });
    const end = points[points.length - 1];
    const servers = end.versions[version] ?? 0;
    return {
      version,
      servers,
      share: end.total > 0 ? servers / end.total : 0,
      peak_share: peak,
      first_seen_at: first === null ? null : iso(first),
      reached_95_at: reached === null ? null : iso(reached),
      time_to_95_s: first !== null && reached !== null ? Math.round((reached - first) / 1000) : null,
      time_to_95_state: timeTo95State(first !== null, before, reached !== null || reachedBefore),
    };
  });
  spread.sort((a, b) => b.servers - a.servers || (a.version < b.version ? -1 : 1));
  return { agent, points, spread };
}

export function shapeHistory(rows: HistoryRow[], o: ShapeOptions): FleetHistory {
  const out: FleetHistory = {
    fleet: o.fleet,
    since: iso(o.since),
    until: iso(o.until),
    period_s: PERIOD_MS / 1000,
    retention_days: RETENTION_MS / DAY_MS,
    metrics: o.metrics,
  };
  if (o.metrics.includes("servers"))
    out.servers = rows.map((r) => ({
      at: iso(Math.max(r.at, o.since)),
      total: r.servers.total ?? 0,
      by_status: Object.fromEntries(SERVER_STATUSES.map((s) => [s, r.servers[s] ?? 0])) as Record<
        (typeof SERVER_STATUSES)[number],
        number
      >,
    }));
  if (o.metrics.includes("versions")) {
    const agents = new Set(rows.flatMap((r) => Object.keys(r.versions)));
    out.versions = [...agents]
      .filter((a) => o.agent === undefined || a === o.agent)
      .sort()
      .map((a) => agentHistory(a, rows, o.since));
  }
  if (o.metrics.includes("reboots")) out.reboots = perDay(rows, o.since, o.until, (r) => r.reboots);
  if (o.metrics.includes("rollouts")) out.rollouts = perDay(rows, o.since, o.until, (r) => r.rollouts);
  return out;
}

/**
 * A CSV cell: quoted when it holds a comma, quote or line break, and a leading = + - @ (or tab, CR)
 * prefixed with ' so a spreadsheet never runs a version string a host reported as a formula.
 */
export function csvCell(value: string | number): string {
  let s = String(value);
  if (typeof value === "string" && /^[=+\-@\t\r]/.test(s)) s = `'${s}`;
  return /[",\r\n]/.test(s) ? `"${s.replaceAll('"', '""')}"` : s;
}

/** One long table for every metric: `at,metric,agent,series,value` (days in `at` for the per-day counts). */
export function historyCsv(h: FleetHistory): string {
  const lines: (string | number)[][] = [["at", "metric", "agent", "series", "value"]];
  for (const p of h.servers ?? []) {
    lines.push([p.at, "servers", "", "total", p.total]);
    for (const [s, n] of Object.entries(p.by_status)) lines.push([p.at, "servers", "", s, n]);
  }
  for (const a of h.versions ?? [])
    for (const p of a.points) {
      for (const [v, n] of Object.entries(p.versions)) lines.push([p.at, "versions", a.agent, v, n]);
      lines.push([p.at, "versions", a.agent, "(not reported)", p.not_reported]);
      if (p.other > 0) lines.push([p.at, "versions", a.agent, "(other)", p.other]);
    }
  for (const d of h.reboots ?? []) lines.push([d.day, "reboots", "", "", d.count]);
  for (const d of h.rollouts ?? []) lines.push([d.day, "rollouts", "", "", d.count]);
  return lines.map((l) => l.map(csvCell).join(",")).join("\r\n") + "\r\n";
}
