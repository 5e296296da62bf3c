/**
 * An analysis sample's I/O, done outside the Rollout object's storage turns: the D1 index (the
 * fleet's failed and stale servers, the released servers' statuses), a Prometheus instant query
 * and HTTPS checks (the reboot gates' own call, ../fleetlock/external-check.ts), each bounded by
 * its timeout. The object asks for a sample from its alarm, keeps a timer that asks again should
 * the answer be lost, and judges the answer in a turn of its own (./analysis.ts): nothing in the
 * object waits for an outsider.
 */
import { and, count, eq, inArray, ne } from "drizzle-orm";
import type { Db } from "../db/client";
import { servers } from "../db/schema";
import { externalCheck, fetchFailure, type Fetcher } from "../fleetlock/external-check";
import { textPrefix } from "../lib/body";
import { chunk } from "../lib/chunk";
import { statusAt } from "../model/server/staleness";
import type { TargetState } from "./machine";
import type { AnalysisCheck } from "../model/strategy";
import { checkName, judgePrometheus, type CheckResult } from "./strategy";

export interface SampleRequest {
  fleet: string;
  phase: number;
  seq: number;
  checks: AnalysisCheck[];
  /** The forward targets of the phases before the analysis (skipped ones left out). */
  released: { server_id: string; hostname: string; state: TargetState }[];
}

export type SampleResult = CheckResult & { name: string };

/** An instant query's answer is a few hundred bytes; more is read no further (the Rollout's memory). */
const MAX_PROMETHEUS_ANSWER_BYTES = 1024 * 1024;

/** The URL of a Prometheus instant query. */
const prometheusQueryUrl = (endpoint: string, query: string) =>
  `${endpoint.replace(/\/+$/, "")}/api/v1/query?query=${encodeURIComponent(query)}`;

/** One Prometheus instant query, judged; an endpoint that does not answer in time fails the check. */
export async function prometheusCheck(
  fetcher: Fetcher,
  c: Extract<AnalysisCheck, { kind: "prometheus" }>,
): Promise<{ ok: boolean; value: number | null; detail: string; reachable: boolean }> {
  try {
    // One deadline for the headers and the body: a fetch's own signal may not reach a body that
    // has started and then stalls (../lib/body.ts).
    const signal = AbortSignal.timeout(c.timeout_s * 1000);
    const res = await fetcher(prometheusQueryUrl(c.endpoint, c.query), {
      method: "GET",
      redirect: "manual",
      headers: { accept: "application/json" },
      signal,
    });
    const { text, truncated } = await textPrefix(res, MAX_PROMETHEUS_ANSWER_BYTES, signal);
    if (truncated)
      return {
        ok: false,
        value: null,
        reachable: true,
        detail: `HTTP ${res.status}, an answer over ${MAX_PROMETHEUS_ANSWER_BYTES} bytes is not one instant query's`,
      };
    let body: unknown;
    try {
      body = JSON.parse(text);
    } catch {
      return { ok: false, value: null, reachable: true, detail: `HTTP ${res.status}, not a Prometheus answer` };
    }
    if (!res.ok && (body as { status?: string })?.status !== "error")
      return { ok: false, value: null, reachable: true, detail: `HTTP ${res.status}` };
    return { ...judgePrometheus(body, c), reachable: true };
  } catch (err) {
    return { ok: false, value: null, reachable: false, detail: fetchFailure(err, c.timeout_s) };
  }
}

/** Every check of one sample, in the checks' order. */
export async function takeSample(db: Db, fetcher: Fetcher, req: SampleRequest, now: number): Promise<SampleResult[]> {
  return Promise.all(
    req.checks.map(async (c, i): Promise<SampleResult> => {
      const name = checkName(c);
      switch (c.kind) {
        case "realized": {
          const done = req.released.filter((t) => t.state === "done").map((t) => t.server_id);
          const unhealthy = new Set<string>();
          for (const part of chunk(done, 90)) {
            const rows = await db
              .select({ id: servers.id, status: statusAt(now) })
              .from(servers)
              .where(inArray(servers.id, part));
            for (const r of rows) if (r.status === "failed" || r.status === "stale") unhealthy.add(r.id);
          }
          const good = done.filter((id) => !unhealthy.has(id)).length;
          const all = req.released.length;
          const value = all === 0 ? 100 : Math.round((10_000 * good) / all) / 100;
          const notDone = req.released.filter((t) => t.state !== "done").map((t) => `${t.hostname} ${t.state}`);
          const sick = req.released.filter((t) => unhealthy.has(t.server_id)).map((t) => `${t.hostname} unhealthy`);
          const bad = [...notDone, ...sick];
          return {
            check: i,
            name,
            ok: value >= c.min_percent,
            value,
            threshold: c.min_percent,
            detail:
              `${good} of ${all} released server(s) realized and healthy` +
              (bad.length ? ` (${bad.slice(0, 5).join(", ")}${bad.length > 5 ? ", …" : ""})` : ""),
          };
        }
        case "failure_percent": {
          const rows = await db
            .select({ status: statusAt(now), n: count() })
            .from(servers)
            .where(and(eq(servers.fleetId, req.fleet), ne(servers.state, "removed")))
            .groupBy(statusAt(now));
          const total = rows.reduce((a, r) => a + r.n, 0);
          const bad = rows.filter((r) => r.status === "failed" || r.status === "stale").reduce((a, r) => a + r.n, 0);
          const value = total ? Math.round((10_000 * bad) / total) / 100 : 0;
          return {
            check: i,
            name,
            ok: value <= c.max_percent,
            value,
            threshold: c.max_percent,
            detail: `${bad} of ${total} server(s) failed or stale (${value} %)`,
          };
        }
        case "prometheus": {
          const r = await prometheusCheck(fetcher, c);
          return { check: i, name, ok: r.ok, value: r.value, threshold: c.threshold, detail: r.detail };
        }
        case "https": {
          const r = await externalCheck(fetcher, c.url, c.timeout_s);
          return { check: i, name, ok: r.ok, value: r.status ?? null, threshold: null, detail: r.detail };
        }
      }
    }),
  );
}
