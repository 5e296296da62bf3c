import { Option, type Command } from "commander";
import { duration } from "../format.ts";
import type { ServerDetail } from "../api.ts";
import { Exit, type Io } from "../io.ts";
import { act } from "../context.ts";
import { SERVER_STATUSES } from "../../src/domain/enums.ts";

const seconds = duration();

export function registerWait(program: Command, io: Io) {
  program
    .command("wait")
    .description("block until something is true (long polls, no sleep loop)")
    .command("server <server>")
    .description("wait until a server reaches a status; exit 3 if the timeout comes first")
    .option("--realized", "wait for status realized (the default)")
    .addOption(new Option("--status <status>", "wait for this status").choices(SERVER_STATUSES))
    .option("--timeout <duration>", "give up after this long (20s, 5m)", seconds, 300)
    .action(
      act(io, async (ctx, id: string, o: { realized?: boolean; status?: string; timeout: number }) => {
        if (o.realized && o.status && o.status !== "realized") throw new Exit(2, "--realized and --status disagree");
        const target = o.status ?? "realized";
        const out = ctx.out;
        const deadline = Date.now() + o.timeout * 1000;
        let { etag, server } = await ctx.api.getServerTagged(id);
        let view: ServerDetail = server;
        const say = (s: ServerDetail) => {
          if (!ctx.machine)
            out.note(
              `${new Date().toISOString()}  ${s.hostname}  ${out.status(s.status)}  generation ${s.reported_generation ?? "-"}/${s.desired_generation}`,
            );
        };
        say(view);
        while (view.status !== target) {
          const left = deadline - Date.now();
          if (left <= 0) {
            if (ctx.machine) out.data(view);
            throw new Exit(3, `timed out after ${o.timeout}s: server ${id} is ${view.status}, not ${target}`);
          }
          // The server parks the request until the view changes; at most 60 s per request.
          const r = await ctx.api.waitServer(id, etag ?? 'W/"-"', Math.max(1, Math.min(60, Math.ceil(left / 1000))));
          etag = r.etag;
          if (r.server) {
            view = r.server;
            say(view);
          }
        }
        if (ctx.machine) return out.data(view);
        out.line(`${view.hostname} is ${out.status(view.status)} at generation ${view.reported_generation}.`);
      }),
    );
}
