import type { Command } from "commander";
import type { Io } from "../io.ts";
import { act } from "../context.ts";

export function registerInstances(program: Command, io: Io) {
  program
    .command("instances")
    .description("agent instances: desired and reported image per server and agent")
    .option("--server <id>", "only this server")
    .option("--agent <name>", "only this agent")
    .option("--image <ref>", "only this image (desired or reported)")
    .option("--limit <n>", "at most this many", Number)
    .action(
      act(io, async (ctx, o) => {
        const items = await ctx.api.listInstances({ server: o.server, agent: o.agent, image: o.image }, o.limit);
        if (ctx.globals.json) return ctx.out.data(items);
        const out = ctx.out;
        out.table(
          ["SERVER", "AGENT", "STATUS", "DESIRED", "REPORTED", "STATE"],
          items.map((i) => [i.server_id, i.agent, out.status(i.status), i.desired?.image, i.reported?.image, i.reported?.state]),
          "(no instances)",
        );
      }),
    );
}
