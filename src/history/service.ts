/** A fleet's history as the API serves it (GET /v1/fleets/{fleet}/history): its rows, shaped. */
import { getDb } from "../db/client";
import type { Env } from "../env";
import { notFound } from "../domain/errors";
import { getFleet } from "../fleets/store";
import { HISTORY_METRICS, sinceOf, type FleetHistory, type HistoryMetric } from "./schemas";
import { shapeHistory } from "./shape";
import { readWindow } from "./store";

const DEFAULT_SINCE = "24h";

export interface HistoryRequest {
  metric?: string;
  since?: string;
  agent?: string;
}

export async function fleetHistory(
  env: Env,
  fleet: string,
  q: HistoryRequest,
  now = Date.now(),
): Promise<FleetHistory> {
  const db = getDb(env.DB);
  if (!(await getFleet(db, fleet))) throw notFound("fleet", fleet);
  // The query was validated by its schema; the same parse gives the time.
  const since = sinceOf(q.since ?? DEFAULT_SINCE, now)!;
  const metrics = q.metric
    ? HISTORY_METRICS.filter((m) => q.metric!.split(",").includes(m))
    : ([...HISTORY_METRICS] as HistoryMetric[]);
  const rows = await readWindow(db, fleet, since, now);
  return shapeHistory(rows, { fleet, since, until: now, metrics, agent: q.agent });
}
