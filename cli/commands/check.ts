import type { Command } from "commander";
import { Exit, type Io } from "../io";
import { act } from "../main";

interface Finding {
  server: string;
  hostname: string;
  agent: string | null;
  instance: string | null;
  desired_image: string | null;
  reported_image: string | null;
  reason: string;
  fix: string;
  advice: string;
}
interface Skipped {
  server: string;
  hostname: string;
  why: string;
}
interface FixAction {
  server: string;
  hostname: string;
  action: string;
  reasons: string[];
  result: { ok: true; outcome: string; generation: number } | { ok: false; error: string } | null;
}

type Filter = { fleet?: string; server?: string; agent?: string };

/**
 * `hm check server-agents [--fix]` (DESIGN §7, after sdcadm): the drift findings with their fix;
 * with --fix, what would be done per server (a dry run), a confirmation, then the fix, page by page.
 */
export function registerCheck(program: Command, io: Io) {
  const check = program.command("check").description("consistency checks");
  check
    .command("server-agents")
    .description("drift between desired and reported agents (exit 3 when something is found); --fix re-plans, re-issues or refreshes")
    .option("--fleet <fleet>", "only this fleet")
    .option("--server <id>", "only this server")
    .option("--agent <name>", "only this agent")
    .option("--fix", "fix what is found (asks first unless --yes)")
    .action(
      act(io, async (ctx, o: Filter & { fix?: boolean }) => {
        const filter: Filter = { fleet: o.fleet, server: o.server, agent: o.agent };
        const api = ctx.api;
        const findings: Finding[] = [];
        const skipped: Skipped[] = [];
        let cursor: string | null = null;
        do {
          const page: { findings: Finding[]; skipped: Skipped[]; next_cursor: string | null } = (
            await api.request<{ findings: Finding[]; skipped: Skipped[]; next_cursor: string | null }>("GET", "/v1/check/server-agents", {
              query: { ...filter, limit: 200, cursor },
            })
          ).data;
          findings.push(...page.findings);
          skipped.push(...page.skipped);
          cursor = page.next_cursor;
        } while (cursor);
        const out = ctx.out;
        if (!o.fix) {
          if (ctx.globals.json) out.data({ findings, skipped });
          else {
            out.table(
              ["HOSTNAME", "AGENT", "REASON", "DESIRED", "REPORTED", "FIX"],
              findings.map((f) => [f.hostname, f.agent ?? "-", f.reason, f.desired_image, f.reported_image, f.fix]),
              "(no drift)",
            );
            if (skipped.length) {
              out.line();
              out.table(["SKIPPED", "WHY"], skipped.map((s) => [s.hostname, s.why]));
            }
          }
          if (findings.length) throw new Exit(3, `${findings.length} finding(s)`);
          return;
        }
        const run = async (dryRun: boolean) => {
          const actions: FixAction[] = [];
          let next: string | null = null;
          do {
            const page: { actions: FixAction[]; next_cursor: string | null } = (
              await api.request<{ actions: FixAction[]; next_cursor: string | null }>("POST", "/v1/check/server-agents/fix", {
                body: { ...filter, dry_run: dryRun, limit: 200, ...(next ? { cursor: next } : {}) },
              })
            ).data;
            actions.push(...page.actions);
            next = page.next_cursor;
          } while (next);
          return actions;
        };
        const planned = await run(true);
        const todo = planned.filter((a) => a.action !== "none");
        if (!ctx.globals.json) {
          out.table(["HOSTNAME", "ACTION", "REASONS"], planned.map((a) => [a.hostname, a.action, a.reasons.join(", ")]), "(nothing to fix)");
        }
        if (todo.length === 0) {
          if (ctx.globals.json) out.data({ actions: planned });
          return;
        }
        await ctx.confirm(`fix ${todo.length} server(s)?`);
        const done = await run(false);
        if (ctx.globals.json) out.data({ actions: done });
        else {
          out.line();
          out.table(
            ["HOSTNAME", "ACTION", "RESULT"],
            done.map((a) => [a.hostname, a.action, a.result ? (a.result.ok ? `${a.result.outcome} (generation ${a.result.generation})` : `failed: ${a.result.error}`) : "-"]),
          );
        }
        const failed = done.filter((a) => a.result && !a.result.ok).length;
        if (failed) throw new Exit(1, `${failed} fix(es) failed`);
      }),
    );
}
