import type { Command } from "commander";
import { Api } from "../api.ts";
import { configPath, writeConfig } from "../config.ts";
import { Exit, type Io } from "../io.ts";
import { act } from "../context.ts";

export function registerLogin(program: Command, io: Io) {
  program
    .command("login")
    .description("check a URL and token, then keep them in the config file (mode 0600)")
    .action(
      act(io, async (ctx) => {
        const { url, token } = ctx.connection;
        // A read that every operator scope may do proves the token before it is written down.
        await new Api(url, token, io.fetch).probe();
        const path = configPath(io.env);
        writeConfig(path, { url, token });
        if (ctx.globals.json) return ctx.out.data({ url, config: path });
        ctx.out.line(`Logged in to ${url}; saved to ${path} (mode 0600).`);
      }),
    );
  program
    .command("whoami", { hidden: true })
    .action(
      act(io, async (ctx) => {
        const c = ctx.connection;
        if (!c) throw new Exit(2, "no connection");
        ctx.out.line(`${c.url} (token from ${c.source})`);
      }),
    );
}
