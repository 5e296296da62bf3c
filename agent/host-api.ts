import type { AgentStatusRow, DesiredConfig, InventoryReport, ServerStatus } from "../src/model/server/schemas.ts";
import { apiErrorOf, type FetchLike, NO_REDIRECTS, withTimeout } from "./http.ts";
import { MAX_DESIRED_BYTES, parseAccepted, parseDesired, readJson } from "./protocol.ts";

/** What `PUT /v1/agent/inventory` answers. */
export interface ReportAccepted {
  server_id: string;
  desired_generation: number;
  status: ServerStatus;
  agents: AgentStatusRow[];
  /** Names the report's content: sent back as X-Report-Tag, a poll stands for it (absent from older servers). */
  report_tag?: string;
}

/** The report a host sends; `errors` and `assignments` as the server stores them. */
export type Report = InventoryReport;

/** `heartbeat`: the server said back the report tag the poll carried (the poll counted as the host's heartbeat). */
export type DesiredAnswer =
  | { changed: true; etag: string; config: DesiredConfig; heartbeat: boolean }
  | { changed: false; etag: string; heartbeat: boolean };

/** The two host endpoints, authenticated with the server's own token. */
export class HostApi {
  private readonly token: string;
  private readonly fetchImpl: FetchLike;
  /** Added to the long-poll wait to bound each request, so a dead connection cannot hang the loop. */
  private readonly slackMs: number;
  private readonly base: string;

  constructor(baseUrl: string, token: string, fetchImpl: FetchLike = (i, init) => fetch(i, init), slackMs = 15_000) {
    this.token = token;
    this.fetchImpl = fetchImpl;
    this.slackMs = slackMs;
    this.base = baseUrl.replace(/\/+$/, "");
  }

  /**
   * `GET /v1/agent/desired`: with the ETag the host holds, the server answers 304 while it is
   * current; `waitS` parks the request until a new generation or the wait runs out. With
   * `reportTag` (the last accepted report's), the poll is also the host's heartbeat.
   */
  async desired(
    etag: string | null,
    waitS: number,
    signal?: AbortSignal,
    reportTag?: string | null,
  ): Promise<DesiredAnswer> {
    const headers: Record<string, string> = { Authorization: `Bearer ${this.token}` };
    if (etag) headers["If-None-Match"] = etag;
    if (reportTag) headers["X-Report-Tag"] = reportTag;
    const query = waitS > 0 && etag ? `?wait=${Math.floor(waitS)}` : "";
    const t = withTimeout(signal, waitS * 1000 + this.slackMs);
    try {
      const res = await this.fetchImpl(`${this.base}/v1/agent/desired${query}`, {
        ...NO_REDIRECTS,
        headers,
        signal: t.signal,
      });
      const heartbeat = !!reportTag && res.headers.get("X-Report-Tag") === reportTag;
      if (res.status === 304) {
        await res.body?.cancel();
        return { changed: false, etag: res.headers.get("ETag") ?? etag!, heartbeat };
      }
      if (!res.ok) throw await apiErrorOf(res);
      const config = parseDesired(await readJson(res, MAX_DESIRED_BYTES, "the desired config"));
      return { changed: true, etag: res.headers.get("ETag") ?? `"${config.generation}"`, config, heartbeat };
    } finally {
      t.done();
    }
  }

  /** `PUT /v1/agent/inventory`: the truth, failures included. */
  async report(report: Report, signal?: AbortSignal): Promise<ReportAccepted> {
    const t = withTimeout(signal, this.slackMs);
    try {
      const res = await this.fetchImpl(`${this.base}/v1/agent/inventory`, {
        ...NO_REDIRECTS,
        method: "PUT",
        headers: { Authorization: `Bearer ${this.token}`, "Content-Type": "application/json" },
        body: JSON.stringify(report),
        signal: t.signal,
      });
      if (!res.ok) throw await apiErrorOf(res);
      return parseAccepted<ReportAccepted>(await readJson(res, MAX_DESIRED_BYTES, "the report's answer"));
    } finally {
      t.done();
    }
  }
}
