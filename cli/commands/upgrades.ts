import type { Command } from "commander";
import type { Io } from "../io.ts";
import { act } from "../context.ts";

export function registerUpgrades(program: Command, io: Io) {
  const upgrades = program
    .command("upgrades")
    .description("data version, pending upgrade steps, lease, history")
    .action(
      act(io, async (ctx) => {
        const u = await ctx.api.upgrades({ limit: 10 });
        if (ctx.machine) return ctx.out.data(u);
        const out = ctx.out;
        out.fields([
          ["state", u.state === "current" ? out.c.green(u.state) : out.c.yellow(u.state)],
          ["data version", `${u.data_version} of ${u.newest_version}`],
          ["pending", u.pending.map((p) => `${p.version}: ${p.description}`).join("; ") || "-"],
          ["lease", u.lease ? `${u.lease.runner} since ${u.lease.started_at}${u.lease.stale ? " (stale)" : ""}` : "-"],
        ]);
        out.line();
        out.table(
          ["VERSION", "STEP", "STATE", "RUNNER", "STARTED", "FINISHED", "ERROR"],
          u.history.items.map((h) => [
            h.version,
            h.description,
            h.state,
            h.runner,
            out.time(h.started_at),
            out.time(h.finished_at),
            h.error,
          ]),
          "(no step history)",
        );
      }),
    );
  upgrades
    .command("run")
    .description("run pending steps now and wait for the outcome (admin)")
    .action(
      act(io, async (ctx) => {
        const r = await ctx.api.runUpgrades();
        if (ctx.machine) return ctx.out.data(r);
        ctx.out.line(
          r.outcome === "up_to_date"
            ? `Data is up to date (version ${r.data_version} of ${r.newest_version}); nothing to run.`
            : `Applied step(s) ${r.applied.join(", ")} (run ${r.run_id}): data now at version ${r.data_version} of ${r.newest_version}.`,
        );
      }),
    );
}
