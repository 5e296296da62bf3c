import type { Command } from "commander";
import type { Io } from "../io.ts";
import { act } from "../context.ts";

export function registerInstances(program: Command, io: Io) {
  program
    .command("instances")
    .description("agent instances: desired and reported image per server and agent")
    .option("--server <server>", "only this server (id, hostname or fleet/hostname)")
    .option("--agent <name>", "only this agent")
    .option("--image <ref>", "only this image (desired or reported)")
    .option(
      "--label <key[=value]>",
      "only servers with this label (zone=eu-1a) or label key (zone); repeatable, all must hold",
      (v: string, prev: string[] = []) => [...prev, v],
    )
    .option("--limit <n>", "at most this many", Number)
    .action(
      act(io, async (ctx, o) => {
        const items = await ctx.api.listInstances(
          { server: o.server, agent: o.agent, image: o.image, label: o.label },
          o.limit,
        );
        if (ctx.machine) return ctx.out.data(items);
        const out = ctx.out;
        out.table(
          [
            "HOSTNAME",
            "AGENT",
            "STATUS",
            "DESIRED",
            "REPORTED",
            "STATE",
            { head: "FLEET", wide: true },
            { head: "SERVER", wide: true },
            { head: "INSTANCE", wide: true },
          ],
          items.map((i) => [
            i.hostname ?? i.server_id,
            i.agent,
            out.status(i.status),
            i.desired?.image,
            i.reported?.image,
            i.reported?.state,
            i.fleet,
            i.server_id,
            i.instance_id,
          ]),
          "(no instances)",
        );
      }),
    );
}
