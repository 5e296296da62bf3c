import { readFileSync } from "node:fs";
import type { Command } from "commander";
import type { DesiredConfigInput } from "../api.ts";
import { Exit, readAll, type Io } from "../io.ts";
import { act } from "../context.ts";

export function registerDesired(program: Command, io: Io) {
  const desired = program.command("desired").description("a server's desired config");
  desired
    .command("get <server>")
    .description("the desired config (generation, agents, lifecycle)")
    .action(
      act(io, async (ctx, id: string) => {
        const d = await ctx.api.getDesired(id);
        if (ctx.machine) return ctx.out.data(d);
        ctx.out.line(`generation ${d.generation}, lifecycle ${d.lifecycle}`);
        ctx.out.table(
          ["AGENT", "IMAGE", "VERSION", "INSTANCE"],
          d.agents.map((a) => [a.name, a.image, a.version, a.instance_id]),
          "(no agents)",
        );
      }),
    );
  desired
    .command("set <server>")
    .description("issue a desired config from a JSON file ('-' for stdin); without a generation, the next one")
    .requiredOption("-f, --file <file>", "JSON: {generation?, agents: [{name, image, version}], lifecycle?}")
    .action(
      act(io, async (ctx, id: string, o: { file: string }) => {
        const text = o.file === "-" ? await readAll(io.stdin) : readFile(o.file);
        let input: Partial<DesiredConfigInput>;
        try {
          input = JSON.parse(text);
        } catch (err) {
          throw new Exit(2, `${o.file === "-" ? "stdin" : o.file} is not JSON: ${(err as Error).message}`);
        }
        if (typeof input !== "object" || input === null || Array.isArray(input))
          throw new Exit(2, "the desired config must be a JSON object");
        const current = await ctx.api.getDesired(id);
        const next = { ...input, generation: input.generation ?? current.generation + 1 } as DesiredConfigInput;
        // Removing agents, or ordering terminate/uninstall, takes things off a host: ask first.
        const kept = new Set((next.agents ?? []).map((a) => a.name));
        const dropped = current.agents.filter((a) => !kept.has(a.name)).map((a) => a.name);
        const lifecycle = next.lifecycle ?? "run";
        if (dropped.length || lifecycle !== "run") {
          if (o.file === "-" && !ctx.globals.yes)
            throw new Exit(
              2,
              "this config removes agents or stops the server; with -f - pass --yes (stdin holds the config, not an answer)",
            );
          const what = [
            dropped.length ? `removes ${dropped.join(", ")}` : "",
            lifecycle !== "run" ? `orders ${lifecycle}` : "",
          ]
            .filter(Boolean)
            .join(" and ");
          await ctx.confirm(`Generation ${next.generation} for server ${id} ${what}. Go on?`);
        }
        const d = await ctx.api.putDesired(id, next);
        if (ctx.machine) return ctx.out.data(d);
        ctx.out.line(
          `Server ${id} now at generation ${d.generation} (${d.agents.length} agents, ${d.lifecycle}); it is pinned: the planner leaves it alone until 'hm desired release ${id}'.`,
        );
      }),
    );
  desired
    .command("release <server>")
    .description(
      "hand a pinned server back to the planner: it is re-planned at once from its roles and the fleet's channels",
    )
    .action(
      act(io, async (ctx, id: string) => {
        const s = await ctx.api.releaseDesired(id);
        if (ctx.machine) return ctx.out.data(s);
        ctx.out.line(
          `Server ${s.hostname} is planned again (generation ${s.desired_generation}: ${s.desired.agents.map((a) => a.name).join(", ") || "no agents"}).`,
        );
      }),
    );
}

function readFile(path: string) {
  try {
    return readFileSync(path, "utf8");
  } catch (err) {
    throw new Exit(2, `cannot read ${path}: ${(err as Error).message}`);
  }
}
