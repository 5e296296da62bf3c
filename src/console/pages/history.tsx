/** @jsxImportSource hono/jsx */
/**
 * The fleet's history in the console: the overview's chart of servers by status, and an agent's
 * page (its versions over time, how far each spread and how fast). Charts are SVG drawn here by
 * renderLineChart, from GET /v1/fleets/{fleet}/history; the CSV is the API's, passed through.
 */
import { Hono } from "hono";
import { raw } from "hono/html";
import { apiFor, qs, read, type InProcessApp } from "../api";
import { NoFleet, page, render, type View } from "../context";
import { requireSession, type ConsoleEnv } from "../guard";
import { Table } from "../ui";
import { renderLineChart, type ChartSeries } from "../../history/chart";
import { FleetHistory, type TimeTo95State } from "../../history/schemas";
import { agentName } from "../../model/server/schemas";
import type { ServerStatus } from "../../domain/enums";

/** The windows the pages offer. */
const WINDOWS = ["24h", "7d", "30d"] as const;
/** What stands in a spread's "Time to 95 %" cell when there is no figure to show. */
const TIME_TO_95_TEXT: Record<TimeTo95State, string> = {
  measured: "—",
  before_window: "before the window",
  not_reached: "not yet",
};
const windowOf = (v: View) => {
  const w = v.c.req.query("since");
  return (WINDOWS as readonly string[]).includes(w ?? "") ? (w as (typeof WINDOWS)[number]) : "24h";
};

const STATUS_SERIES: [ServerStatus, string, string][] = [
  ["realized", "realized", "#0b6e4f"],
  ["pending", "converging", "#1f5fa8"],
  ["failed", "failed", "#b00020"],
  ["drifted", "drifted", "#8a5a00"],
  ["stale", "stale", "#5f5f5f"],
  ["unknown", "never reported", "#6b3fa0"],
];

/** Times on the x axis in UTC: hours for a day, dates beyond. */
function xFormat(h: FleetHistory) {
  const span = Date.parse(h.until) - Date.parse(h.since);
  return span <= 2 * 86_400_000
    ? (x: number) => new Date(x).toISOString().slice(11, 16)
    : (x: number) => new Date(x).toISOString().slice(5, 10);
}

export const historyPath = (fleet: string, query: Record<string, string | undefined>) =>
  `/v1/fleets/${encodeURIComponent(fleet)}/history${qs(query)}`;

/** The servers-by-status chart (SVG markup) of a history. */
function serversChart(h: FleetHistory, id = "servers-chart"): string {
  const points = h.servers ?? [];
  const series: ChartSeries[] = STATUS_SERIES.filter(([key]) => points.some((p) => p.by_status[key] > 0)).map(
    ([key, name, color]) => ({
      name,
      color,
      points: points.map((p) => ({ x: Date.parse(p.at), y: p.by_status[key] })),
    }),
  );
  return renderLineChart(series, {
    id,
    title: `Servers of ${h.fleet} by status, since ${h.since.slice(0, 16).replace("T", " ")} UTC`,
    xLabel: "time (UTC)",
    yLabel: "servers",
    step: true,
    xMin: Date.parse(h.since),
    xMax: Date.parse(h.until),
    formatX: xFormat(h),
  });
}

/** The overview's card: servers by status over the window, the agents' pages, the CSV. */
export const HistoryCard = ({ h, fleet }: { h: FleetHistory; fleet: string }) => {
  const f = encodeURIComponent(fleet);
  return (
    <section class="card history" aria-labelledby="h-history" id="overview-history">
      <h2 id="h-history">Servers over the last 24 hours</h2>
      <figure>{raw(serversChart(h))}</figure>
      <p class="small">
        {(h.versions ?? []).length > 0 ? (
          <>
            Versions over time:{" "}
            {(h.versions ?? []).map((a, i) => (
              <>
                {i > 0 ? ", " : ""}
                <a href={`/console/agents/${encodeURIComponent(a.agent)}?fleet=${f}`}>{a.agent}</a>
              </>
            ))}
            .{" "}
          </>
        ) : null}
        <a href={`/console/history.csv?fleet=${f}&since=30d`} download="">
          Download 30 days as CSV
        </a>{" "}
        <span class="muted">(a row every 5 minutes when a figure changed; kept 30 days)</span>
      </p>
    </section>
  );
};

const pct = (share: number) => `${Math.round(share * 1000) / 10} %`;
const span = (s: number) =>
  s < 90 ? `${s} s` : s < 5400 ? `${Math.round(s / 60)} min` : `${Math.round((s / 3600) * 10) / 10} h`;

async function agentPage(v: View) {
  if (!v.fleet) return render(v, "overview", "Agent", <NoFleet session={v.session} />);
  const name = v.c.req.param("agent") ?? "";
  if (!agentName.safeParse(name).success)
    return render(v, "overview", "Not found", <p role="alert">No agent can be called that.</p>, 404);
  const since = windowOf(v);
  const h = await read(v, FleetHistory, historyPath(v.fleet, { metric: "versions", agent: name, since }));
  const a = h.versions?.[0];
  const f = encodeURIComponent(v.fleet);
  // The versions that ever held a tenth of the servers, the rest together: a chart stays legible.
  const shown = (a?.spread ?? []).filter((s) => s.peak_share >= 0.1).slice(0, 6);
  const series: ChartSeries[] = shown.map((s) => ({
    name: s.version,
    points: (a?.points ?? []).map((p) => ({
      x: Date.parse(p.at),
      y: p.total ? (100 * (p.versions[s.version] ?? 0)) / p.total : 0,
    })),
  }));
  if (a && a.points.some((p) => p.not_reported > 0))
    series.push({
      name: "not reported",
      color: "#5f5f5f",
      points: a.points.map((p) => ({ x: Date.parse(p.at), y: p.total ? (100 * p.not_reported) / p.total : 0 })),
    });
  const chart = renderLineChart(series, {
    id: "versions-chart",
    title: `Versions of ${name} in ${v.fleet}: share of its servers, since ${h.since.slice(0, 16).replace("T", " ")} UTC`,
    xLabel: "time (UTC)",
    yLabel: "% of servers",
    step: true,
    yMax: 100,
    xMin: Date.parse(h.since),
    xMax: Date.parse(h.until),
    formatX: xFormat(h),
    formatY: (y) => `${Math.round(y)} %`,
  });
  return render(
    v,
    "overview",
    `Agent ${name}`,
    <>
      <h1>
        Agent <span class="mono">{name}</span> in <span class="mono">{v.fleet}</span>
      </h1>
      <nav aria-label="Window" class="small">
        Window:{" "}
        {WINDOWS.map((w, i) => (
          <>
            {i > 0 ? " · " : ""}
            {w === since ? (
              <strong aria-current="page">{w}</strong>
            ) : (
              <a href={`/console/agents/${encodeURIComponent(name)}?fleet=${f}&since=${w}`}>{w}</a>
            )}
          </>
        ))}
      </nav>
      <figure class="card history">{raw(chart)}</figure>
      {!a ? (
        <p class="muted">No server of this fleet ran {name} in this window.</p>
      ) : (
        <Table
          id="agent-spread"
          caption="How far each version spread"
          head={[
            "Version",
            ["Servers", "num"],
            ["Share", "num"],
            ["Peak", "num"],
            "First seen",
            "Reached 95 %",
            ["Time to 95 %", "num"],
          ]}
        >
          {a.spread.map((s) => (
            <tr>
              <td class="mono">{s.version}</td>
              <td class="num">{s.servers}</td>
              <td class="num">{pct(s.share)}</td>
              <td class="num">{pct(s.peak_share)}</td>
              <td>
                {s.first_seen_at ? (
                  s.first_seen_at.slice(0, 16).replace("T", " ")
                ) : (
                  <span class="muted">before the window</span>
                )}
              </td>
              <td>
                {s.reached_95_at ? s.reached_95_at.slice(0, 16).replace("T", " ") : <span class="muted">not yet</span>}
              </td>
              <td class="num">
                {s.time_to_95_s !== null ? (
                  span(s.time_to_95_s)
                ) : (
                  <span class="muted">{TIME_TO_95_TEXT[s.time_to_95_state]}</span>
                )}
              </td>
            </tr>
          ))}
        </Table>
      )}
      <p class="small">
        <a
          href={`/console/history.csv?fleet=${f}&metric=versions&agent=${encodeURIComponent(name)}&since=${since}`}
          download=""
        >
          Download as CSV
        </a>
      </p>
    </>,
  );
}

export function historyPages(getApp: () => InProcessApp) {
  return (
    new Hono<ConsoleEnv>()
      .get("/console/agents/:agent", requireSession, page(getApp, "overview", agentPage))
      // The API's CSV for the session's fleet: a browser's download has no bearer token to send.
      .get("/console/history.csv", requireSession, async (c) => {
        const fleet = c.req.query("fleet") ?? "";
        const q = c.req.query();
        const api = apiFor(c, getApp, c.get("session").token);
        const res = await api<string>(
          "GET",
          historyPath(fleet, { metric: q.metric, agent: q.agent, since: q.since, format: "csv" }),
        );
        if (!res.ok) return c.text(`The API refused: ${JSON.stringify(res.json)}`, res.status === 404 ? 404 : 400);
        return c.body(String(res.json), 200, {
          "Content-Type": "text/csv; charset=utf-8",
          "Content-Disposition": `attachment; filename="history-${fleet.replace(/[^a-z0-9-]/g, "")}.csv"`,
        });
      })
  );
}
