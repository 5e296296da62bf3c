/**
 * `hm status`: one screen from one request (GET /v1/status): per fleet, servers counted by status
 * and state on the server, the ones that need a look (capped, with "and N more"), reboot groups
 * with their holders, rollouts in progress; the data version. `--watch` redraws it.
 */
import type { Command } from "commander";
import { sleep } from "../../agent/http.ts";
import type { StatusAnswer } from "../api.ts";
import { duration, visible } from "../format.ts";
import { Exit, untilStopped, type Io, type Output } from "../io.ts";
import { act, type Ctx } from "../context.ts";

type FleetStatus = StatusAnswer["fleets"][number];

function render(out: Output, url: string, s: StatusAnswer) {
  const c = out.c;
  out.line(
    `${c.bold("Harbormaster")} ${url}  data ${s.data.data_version}/${s.data.newest_version} ${s.data.state === "current" ? c.green("current") : c.yellow(s.data.state)}`,
  );
  if (!s.fleets.length) out.line(c.dim("(no fleets)"));
  for (const f of s.fleets) renderFleet(out, f);
  if (s.more_fleets) out.line(c.dim(`\n(more fleets than shown: hm status --fleet F for one)`));
}

function renderFleet(out: Output, f: FleetStatus) {
  const c = out.c;
  out.line();
  const by = Object.entries(f.servers.by_status)
    .sort()
    .map(([k, v]) => `${out.status(k)} ${v}`)
    .join("  ");
  const states = Object.entries(f.servers.by_state)
    .sort()
    .map(([k, v]) => `${k} ${v}`)
    .join("  ");
  out.line(`${c.bold(`Fleet ${f.id}`)}  ${f.servers.total} servers   ${by || "-"}`);
  if (states) out.line(`  state   ${states}`);
  for (const a of f.attention) {
    for (const s of a.items)
      out.line(
        `  ${out.status(s.status)}${" ".repeat(Math.max(0, 8 - s.status.length))} ${visible(s.hostname)}  last seen ${s.last_seen ? out.time(s.last_seen) : "never"}`,
      );
    const more = a.count - a.items.length;
    if (more > 0)
      out.line(`  ${c.dim(`and ${more} more ${a.status} (hm servers --fleet ${f.id} --status ${a.status})`)}`);
  }
  for (const g of f.reboot_groups) {
    const flags = [
      g.paused ? c.yellow("paused") : "",
      g.open_now ? "" : c.yellow("closed"),
      g.queued ? `${g.queued} queued` : "",
    ]
      .filter(Boolean)
      .join(" ");
    const holders = g.holders
      .map((h) => `${visible(h.hostname ?? h.id)}${h.stuck ? c.red(" (stuck)") : ""}`)
      .join(", ");
    out.line(`  reboot group ${g.name}: ${g.held}/${g.slots} held ${flags}${holders ? `  ${holders}` : ""}`);
  }
  if (!f.rollouts.length) out.line(c.dim("  rollouts: none in progress"));
  for (const r of f.rollouts) {
    const n = (k: string) => r.counts[k] ?? 0;
    const total = Object.values(r.counts).reduce((a, b) => a + b, 0);
    out.line(
      `  rollout ${visible(r.agent)} → ${visible(r.image)}: ${r.state}${r.pass ? " (rollback)" : ""}, ${n("done")}/${total} done, ${n("applying")} applying, ${n("failed") + n("timed_out")} failed  ${c.dim(r.id)}`,
    );
  }
}

const needsLook = (s: StatusAnswer) => s.fleets.reduce((n, f) => n + f.attention.reduce((m, a) => m + a.count, 0), 0);

async function once(ctx: Ctx, o: { fleet?: string; attention: number }) {
  const s = await ctx.api.status({ fleet: o.fleet, attention: o.attention });
  const url = ctx.connection.url;
  if (ctx.machine) ctx.out.data({ url, ...s });
  else render(ctx.out, url, s);
  return s;
}

export function registerStatus(program: Command, io: Io) {
  program
    .command("status")
    .description(
      "one screen: servers by status and state, those needing a look, reboot groups and holders, rollouts in progress, data version",
    )
    .option("--fleet <fleet>", "only this fleet")
    .option("--check", "exit 3 when any server is failed, stale or drifted")
    .option("--show <n>", "servers listed per status that needs a look (the rest are counted)", (v) => Number(v), 20)
    .option("-w, --watch", "redraw until Ctrl-C")
    .option("--interval <duration>", "with --watch, time between looks", duration({ min: 0.5 }), 2)
    .option("--for <duration>", "with --watch, stop after this long", duration())
    .action(
      act(
        io,
        async (
          ctx,
          o: { fleet?: string; check?: boolean; show: number; watch?: boolean; interval: number; for?: number },
        ) => {
          if (!o.watch) {
            const s = await once(ctx, { fleet: o.fleet, attention: o.show });
            const found = needsLook(s);
            if (o.check && found > 0) throw new Exit(3, `${found} server(s) need a look`);
            return;
          }
          await untilStopped(o.for, async (signal) => {
            while (!signal.aborted) {
              // On a terminal the screen is redrawn in place; piped, each look follows the last.
              if (ctx.io.interactive && !ctx.machine) ctx.io.stdout("\x1b[2J\x1b[H");
              await once(ctx, { fleet: o.fleet, attention: o.show });
              await sleep(o.interval * 1000, signal).catch(() => {});
              if (!ctx.io.interactive && !signal.aborted && !ctx.machine) ctx.out.line();
            }
          });
        },
      ),
    );
}
