import type { Command } from "commander";
import { Exit, type Io } from "../io.ts";
import { act, fleetOption, type Ctx } from "../context.ts";
import { blockedText } from "../format.ts";

type Filter = { fleet?: string; server?: string; agent?: string };

/** `--fix`: one action per server (re-issue, refresh, or nothing), dry run first, then for real. */
async function fix(ctx: Ctx, filter: Filter) {
  const run = async (dryRun: boolean) => {
    const actions = [];
    let cursor: string | undefined;
    do {
      const page = await ctx.api.fixServerAgents(filter, dryRun, cursor);
      actions.push(...page.actions);
      cursor = page.next_cursor ?? undefined;
    } while (cursor);
    return actions;
  };
  const out = ctx.out;
  const planned = await run(true);
  const todo = planned.filter((a) => a.action !== "none");
  if (!ctx.machine) {
    out.table(
      ["FLEET", "HOSTNAME", "ACTION", "REASONS", { head: "SERVER", wide: true }],
      planned.map((a) => [a.fleet, a.hostname, a.action, a.reasons.join(", "), a.server]),
      "nothing to fix",
    );
  }
  if (todo.length === 0) {
    if (ctx.machine) out.data({ actions: planned });
    return;
  }
  await ctx.confirm(`fix ${todo.length} server(s)?`);
  const done = await run(false);
  const notDone = done.filter((a) => a.result && !a.result.ok);
  if (ctx.machine) out.data({ actions: done });
  else {
    out.line();
    out.table(
      ["FLEET", "HOSTNAME", "ACTION", "RESULT", { head: "SERVER", wide: true }],
      done.map((a) => [a.fleet, a.hostname, a.action, resultText(a.result), a.server]),
    );
    if (notDone.length) {
      out.line();
      for (const l of summary(done)) out.line(l);
    }
  }
  if (notDone.length) throw new Exit(1, `${notDone.length} of ${done.filter((a) => a.result).length} fix(es) not done`);
}

type Result = { ok: true; outcome: string; generation: number } | Refusal | null;
type Refusal = { ok: false; error: string; message: string; blocked_by?: { message: string }[] };

/** What became of one server: done, refused for the disruption budget (naming who holds it), or failed and why. */
function resultText(r: Result): string {
  if (!r) return "-";
  if (r.ok) return `${r.outcome} (generation ${r.generation})`;
  const why = blockedText(r.blocked_by) ?? r.message;
  return `${r.error === "budget_exhausted" ? "refused" : "failed"}: ${r.error}${why ? ` (${why})` : ""}`;
}

/** Per fleet: how many servers were fixed, and how many were not, by error code. */
function summary(done: readonly { fleet: string; result: Result }[]): string[] {
  const fleets = new Map<string, { fixed: number; not: Map<string, number> }>();
  for (const a of done) {
    if (!a.result) continue;
    const f = fleets.get(a.fleet) ?? { fixed: 0, not: new Map() };
    if (a.result.ok) f.fixed++;
    else f.not.set(a.result.error, (f.not.get(a.result.error) ?? 0) + 1);
    fleets.set(a.fleet, f);
  }
  return [...fleets].map(([fleet, f]) => {
    const not = [...f.not].map(([code, n]) => `${n} ${code}`).join(", ");
    return `${fleet}: ${f.fixed} fixed${not ? `, not fixed: ${not}` : ""}`;
  });
}

export function registerCheck(program: Command, io: Io) {
  program
    .command("check")
    .description("checks that exit 3 when they find something")
    .command("server-agents")
    .description("drift between desired and reported agents, one finding per problem with its fix")
    .option("--fleet <fleet>", "only this fleet")
    .option("--server <server>", "only this server (id, hostname or fleet/hostname)")
    .option("--agent <name>", "only this agent")
    .option("--fix", "fix what is found: shows the dry run, asks (unless --yes), then re-plans, re-issues or refreshes")
    .action(
      act(io, async (ctx, o: { fleet?: string; server?: string; agent?: string; fix?: boolean }) => {
        if (o.fix) return fix(ctx, { fleet: o.fleet, server: o.server, agent: o.agent });
        const findings = [];
        const skipped = [];
        let cursor: string | undefined;
        do {
          const page = await ctx.api.checkServerAgents({ fleet: o.fleet, server: o.server, agent: o.agent }, cursor);
          findings.push(...page.findings);
          skipped.push(...page.skipped);
          cursor = page.next_cursor ?? undefined;
        } while (cursor);
        const out = ctx.out;
        if (ctx.machine) out.data({ findings, skipped });
        else {
          out.table(
            ["HOSTNAME", "AGENT", "REASON", "DESIRED", "REPORTED", "FIX", "ADVICE", { head: "SERVER", wide: true }],
            findings.map((f) => [
              f.hostname,
              f.agent,
              out.c.yellow(f.reason),
              f.desired_image,
              f.reported_image,
              f.fix,
              f.advice,
              f.server,
            ]),
            "no drift",
          );
          if (skipped.length) {
            out.line();
            out.table(
              ["SKIPPED", "WHY", { head: "SERVER", wide: true }],
              skipped.map((s) => [s.hostname, s.why, s.server]),
            );
          }
        }
        if (findings.length) throw new Exit(3, `${findings.length} finding(s)`);
      }),
    );

  // What drift fixes hold of a fleet's disruption budget, and an operator's release of one.
  const holds = program
    .command("fix-holds")
    .description("the disruption budget's units drift fixes hold, per server (docs/reboot-safety.md)");
  holds
    .command("list", { isDefault: true })
    .description("each server a drift fix holds a unit for: writing, written (waiting to be realized), counted failed")
    .addOption(fleetOption("the fleet"))
    .action(
      act(io, async (ctx, o: { fleet: string }) => {
        const res = await ctx.api.listFixHolds(o.fleet);
        if (ctx.machine) return ctx.out.data(res.items);
        ctx.out.table(
          ["HOSTNAME", "STATE", "SINCE", "SETTLES", "GENERATION", { head: "SERVER", wide: true }],
          res.items.map((h) => [
            h.server.hostname ?? h.server.id,
            h.state === "writing" ? h.state : ctx.out.c.yellow(h.state.replace("_", " ")),
            h.since,
            h.settles_at,
            h.written_generation === null ? null : `${h.seen_generation ?? "?"} -> ${h.written_generation}`,
            h.server.id,
          ]),
          "(no drift fix holds a unit)",
        );
      }),
    );
  holds
    .command("release <server>")
    .description(
      "free the unit a drift fix holds for a server that never reported realized (audited); <server>: id or hostname",
    )
    .addOption(fleetOption("the fleet"))
    .action(
      act(io, async (ctx, server: string, o: { fleet: string }) => {
        await ctx.confirm(
          `Free the budget unit held for '${server}' in ${o.fleet}? If its agents are still restarting, another server may go down beside it.`,
        );
        const res = await ctx.api.releaseFixHold(o.fleet, server);
        if (ctx.machine) return ctx.out.data(res);
        ctx.out.line(
          `Freed the unit held for ${res.released.server.hostname ?? res.released.server.id} (${res.released.state.replace("_", " ")} since ${res.released.since}).`,
        );
      }),
    );
}
