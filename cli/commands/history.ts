/**
 * `hm history`: the fleet over time (GET /v1/fleets/{fleet}/history), from the cron's rollup:
 * servers by status at each change, each agent's versions (how far each spread, time to 95 %),
 * reboots and rollouts per day. -o json the API's object, -o csv the API's CSV.
 */
import { InvalidArgumentError, type Command } from "commander";
import type { FleetHistory } from "../api.ts";
import { humanSpan, visible } from "../format.ts";
import type { Io, Output } from "../io.ts";
import { act, csvCommand, fleetOption } from "../context.ts";

const METRICS = ["servers", "versions", "reboots", "rollouts"];

/** --metric, repeatable or comma-separated, checked here so a typo is a usage error naming the choices. */
function metricList(value: string, previous: string[] = []): string[] {
  const out = [...previous];
  for (const m of value.split(",").map((s) => s.trim())) {
    if (!METRICS.includes(m)) throw new InvalidArgumentError(`expected one of ${METRICS.join(", ")}`);
    if (!out.includes(m)) out.push(m);
  }
  return out;
}

const percent = (share: number) => `${Math.round(share * 1000) / 10} %`;

export function registerHistory(program: Command, io: Io) {
  const cmd = program
    .command("history")
    .description("the fleet over time: servers by status, agents' versions, reboots and rollouts per day")
    .addOption(fleetOption())
    .option("--metric <metric>", `which figures (repeatable or comma-separated): ${METRICS.join(", ")}`, metricList)
    .option("--since <when>", "start of the window: 90m, 24h, 7d (at most 30d) or an ISO time", "24h")
    .option("--agent <name>", "only this agent's versions")
    .addHelpText("after", "\n-o csv prints the API's CSV (at,metric,agent,series,value); -o json its object.")
    .action(
      act(io, async (ctx, o: { fleet: string; metric?: string[]; since: string; agent?: string }) => {
        const query = { metric: o.metric?.join(","), since: o.since, agent: o.agent };
        if (ctx.format === "csv") {
          io.stdout(await ctx.api.historyCsv(o.fleet, query));
          return;
        }
        const h = await ctx.api.history(o.fleet, query);
        if (ctx.machine) return ctx.out.data(h, () => h.fleet);
        render(ctx.out, h);
      }),
    );
  csvCommand(cmd);
}

function render(out: Output, h: FleetHistory) {
  const c = out.c;
  out.line(
    `${c.bold(`Fleet ${h.fleet}`)}  ${out.time(h.since)} to ${out.time(h.until)}  ${c.dim(`(a row every ${h.period_s / 60} min when a figure changed, kept ${h.retention_days} days)`)}`,
  );
  if (h.servers) {
    out.line();
    out.line(c.bold("Servers by status"));
    out.table(
      ["AT", "TOTAL", "REALIZED", "PENDING", "FAILED", "DRIFTED", "STALE", "NEVER REPORTED"],
      h.servers.map((p) => [
        out.time(p.at),
        p.total,
        p.by_status.realized,
        p.by_status.pending,
        p.by_status.failed,
        p.by_status.drifted,
        p.by_status.stale,
        p.by_status.unknown,
      ]),
      "(no history yet: the cron rolls up every 5 minutes)",
    );
  }
  if (h.versions) {
    out.line();
    out.line(c.bold("Versions"));
    out.table(
      ["AGENT", "VERSION", "SERVERS", "SHARE", "PEAK", "FIRST SEEN", "95 % AT", "TIME TO 95 %"],
      h.versions.flatMap((a) =>
        a.spread.map((s) => [
          visible(a.agent),
          visible(s.version),
          s.servers,
          percent(s.share),
          percent(s.peak_share),
          s.first_seen_at ? out.time(s.first_seen_at) : c.dim("before"),
          s.reached_95_at ? out.time(s.reached_95_at) : c.dim("-"),
          s.time_to_95_s !== null
            ? humanSpan(s.time_to_95_s)
            : c.dim(s.time_to_95_state === "before_window" ? "before the window" : "not yet"),
        ]),
      ),
      "(no agent versions in this window)",
    );
  }
  if (h.reboots || h.rollouts) {
    out.line();
    out.line(c.bold("Per day (UTC)"));
    const days = [...new Set([...(h.reboots ?? []), ...(h.rollouts ?? [])].map((d) => d.day))].sort();
    const count = (list: { day: string; count: number }[] | undefined, day: string) =>
      list ? (list.find((d) => d.day === day)?.count ?? 0) : c.dim("-");
    out.table(
      ["DAY", "REBOOTS", "ROLLOUTS"],
      days.map((d) => [d, count(h.reboots, d), count(h.rollouts, d)]),
    );
  }
}
