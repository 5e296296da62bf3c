/**
 * Contexts: several servers and their tokens in the config file, one of them current (as
 * kubectl's). `hm login --name N` adds or updates one; `--context N` (or HM_CONTEXT) picks one
 * for a single command.
 */
import type { Command } from "commander";
import { configPath, readConfig, writeConfig } from "../config.ts";
import { Exit, type Io } from "../io.ts";
import { act, type Ctx } from "../context.ts";

function load(ctx: Ctx) {
  const path = configPath(ctx.io.env);
  return { path, config: readConfig(path) ?? { current: null, contexts: {} } };
}

/** A value in single quotes for sh, bash and zsh. */
const shQuote = (v: string) => `'${v.replace(/'/g, `'\\''`)}'`;

export function registerContexts(program: Command, io: Io) {
  program
    .command("env")
    .description(
      'print export lines for HM_URL and HM_TOKEN as hm resolves them (eval "$(hm env)": curl and scripts then use the same server)',
    )
    .action(
      act(io, async (ctx) => {
        const c = ctx.connection;
        if (ctx.machine)
          return ctx.out.data(
            { url: c.url, token: c.token, url_from: c.urlFrom, token_from: c.tokenFrom },
            () => c.url,
          );
        ctx.out.line(`export HM_URL=${shQuote(c.url)}`);
        ctx.out.line(`export HM_TOKEN=${shQuote(c.token)}`);
        ctx.out.note(`# ${c.url} (URL from ${c.urlFrom}; token from ${c.tokenFrom})`);
      }),
    );

  const contexts = program
    .command("context")
    .description("servers and tokens kept in the config file (list by default)");
  contexts
    .command("list", { isDefault: true })
    .description("every context; * marks the current one")
    .action(
      act(io, async (ctx) => {
        const { config } = load(ctx);
        const rows = Object.entries(config.contexts).map(([name, c]) => ({
          name,
          url: c.url,
          fleet: c.fleet ?? null,
          current: name === config.current,
        }));
        if (ctx.machine) return ctx.out.data(rows, (r) => r.name);
        ctx.out.table(
          ["CURRENT", "NAME", "URL", "FLEET"],
          rows.map((r) => [r.current ? "*" : "", r.name, r.url, r.fleet]),
          "(no contexts: hm login --name NAME --url URL --token TOKEN)",
        );
      }),
    );
  contexts
    .command("use <name>")
    .description("make a context the current one")
    .action(
      act(io, async (ctx, name: string) => {
        const { path, config } = load(ctx);
        if (!config.contexts[name])
          throw new Exit(1, `no context '${name}' (known: ${Object.keys(config.contexts).join(", ") || "none"})`);
        config.current = name;
        writeConfig(path, config);
        if (ctx.machine) return ctx.out.data({ current: name, url: config.contexts[name].url });
        ctx.out.line(`Now using context '${name}' (${config.contexts[name].url}).`);
      }),
    );
  contexts
    .command("current")
    .description("the context in use")
    .action(
      act(io, async (ctx) => {
        const c = ctx.connection;
        if (ctx.machine)
          return ctx.out.data(
            { context: c.context ?? null, url: c.url, token_from: c.source, url_from: c.urlFrom },
            () => c.context ?? "",
          );
        ctx.out.line(`${c.context ?? "(no context)"}  ${c.url}  (URL from ${c.urlFrom}; token from ${c.tokenFrom})`);
      }),
    );
  contexts
    .command("set-fleet <fleet>")
    .description("keep a fleet in the context (the current one, or --context's): fleet commands then need no --fleet")
    .action(
      act(io, async (ctx, fleet: string) => {
        const { path, config } = load(ctx);
        const name = ctx.globals.context ?? config.current;
        if (!name || !config.contexts[name]) {
          throw new Exit(
            2,
            `no context to keep a fleet in (hm login --name NAME --url URL --token TOKEN --fleet ${fleet} makes one; HM_FLEET=${fleet} works without)`,
          );
        }
        config.contexts[name].fleet = fleet;
        writeConfig(path, config);
        if (ctx.machine) return ctx.out.data({ context: name, fleet }, () => name);
        ctx.out.line(`Context '${name}' now uses fleet '${fleet}' when --fleet is not given.`);
      }),
    );
  contexts
    .command("delete <name>")
    .description("forget a context")
    .action(
      act(io, async (ctx, name: string) => {
        const { path, config } = load(ctx);
        if (!config.contexts[name]) throw new Exit(1, `no context '${name}'`);
        await ctx.confirm(`Forget context '${name}' (${config.contexts[name].url}) and its token?`);
        delete config.contexts[name];
        if (config.current === name) config.current = null;
        writeConfig(path, config);
        if (ctx.machine) return ctx.out.data({ name, deleted: true }, () => name);
        ctx.out.line(`Forgot context '${name}'.`);
      }),
    );
}
