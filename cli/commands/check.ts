import type { Command } from "commander";
import { Exit, type Io } from "../io";
import { act } from "../main";

export function registerCheck(program: Command, io: Io) {
  program
    .command("check")
    .description("checks that exit 3 when they find something")
    .command("server-agents")
    .description("drift between desired and reported agents, one finding per problem with its fix")
    .option("--fleet <fleet>", "only this fleet")
    .option("--server <id>", "only this server")
    .option("--agent <name>", "only this agent")
    .action(
      act(io, async (ctx, o: { fleet?: string; server?: string; agent?: string }) => {
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
        if (ctx.globals.json) out.data({ findings, skipped });
        else {
          out.table(
            ["HOSTNAME", "SERVER", "AGENT", "REASON", "DESIRED", "REPORTED", "FIX", "ADVICE"],
            findings.map((f) => [f.hostname, f.server, f.agent, out.c.yellow(f.reason), f.desired_image, f.reported_image, f.fix, f.advice]),
            "no drift",
          );
          if (skipped.length) {
            out.line();
            out.table(["SKIPPED", "SERVER", "WHY"], skipped.map((s) => [s.hostname, s.server, s.why]));
          }
        }
        if (findings.length) throw new Exit(3, `${findings.length} finding(s)`);
      }),
    );
}
