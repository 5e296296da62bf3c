import { d1Counters } from "./db/client";

/** Per-isolate counters; Prometheus sums them across isolates. */
const responses = new Map<number, number>();

export function recordResponse(status: number) {
  responses.set(status, (responses.get(status) ?? 0) + 1);
}

/** What the cron's staleness marking read and changed (DESIGN §8: it must grow with change, not fleet size). */
export const staleCounters = { ticks: 0, rowsRead: 0, marked: 0 };

export function metricsText() {
  const lines = [
    "# HELP harbormaster_d1_statements_total D1 statements executed by this isolate.",
    "# TYPE harbormaster_d1_statements_total counter",
    `harbormaster_d1_statements_total{kind="read"} ${d1Counters.reads}`,
    `harbormaster_d1_statements_total{kind="write"} ${d1Counters.writes}`,
    "# HELP harbormaster_stale_marking_total The cron's staleness marking: ticks, D1 rows it read, servers it marked.",
    "# TYPE harbormaster_stale_marking_total counter",
    `harbormaster_stale_marking_total{what="ticks"} ${staleCounters.ticks}`,
    `harbormaster_stale_marking_total{what="rows_read"} ${staleCounters.rowsRead}`,
    `harbormaster_stale_marking_total{what="marked"} ${staleCounters.marked}`,
    "# HELP harbormaster_http_responses_total HTTP responses by status.",
    "# TYPE harbormaster_http_responses_total counter",
    ...[...responses].map(([status, n]) => `harbormaster_http_responses_total{status="${status}"} ${n}`),
  ];
  return lines.join("\n") + "\n";
}
