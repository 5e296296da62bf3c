import type { Command } from "commander";
import { Api } from "../api.ts";
import { configPath, DEFAULT_CONTEXT, readConfig, UsageError, writeConfig } from "../config.ts";
import { ssoLogin } from "../sso.ts";
import { Exit, type Io } from "../io.ts";
import { act } from "../context.ts";

export function registerLogin(program: Command, io: Io) {
  program
    .command("login")
    .description("check a URL and token, then keep them in the config file (mode 0600) as a context, and use it")
    .option("--name <context>", "the context's name (default: the current one, else 'default')")
    .option("--fleet <fleet>", "the fleet commands use when --fleet is not given (hm context set-fleet changes it)")
    .option("--sso", "sign in through the deployment's identity provider in the browser: a short-lived token")
    .option("--no-browser", "with --sso: print the sign-in URL without opening a browser")
    .action(
      act(io, async (ctx, o: { name?: string; fleet?: string; sso?: boolean; browser: boolean }) => {
        const path = configPath(io.env);
        const config = readConfig(path) ?? { current: null, contexts: {} };
        const name = o.name ?? ctx.globals.context ?? config.current ?? DEFAULT_CONTEXT;
        let url: string;
        let token: string;
        let expiresAt: string | null = null;
        if (o.sso) {
          const base = ctx.globals.url ?? io.env.HM_URL ?? config.contexts[name]?.url;
          if (!base) throw new UsageError("hm login --sso needs the server: --url URL (or HM_URL, or a context's URL)");
          url = base.replace(/\/+$/, "");
          const fetchImpl = io.fetch ?? ((i, init) => fetch(i, init));
          const got = await ssoLogin(url, {
            fetch: fetchImpl,
            say: (s) => io.stderr(s),
            open: o.browser && io.interactive,
          });
          token = got.token;
          expiresAt = got.expires_at;
        } else {
          ({ url, token } = ctx.connection);
        }
        // A read that every operator scope may do proves the token before it is written down.
        await new Api(url, token, io.fetch).probe();
        const fleet = o.fleet ?? (config.contexts[name]?.url === url ? config.contexts[name]?.fleet : undefined);
        config.contexts[name] = { url, token, ...(fleet ? { fleet } : {}) };
        config.current = name;
        writeConfig(path, config);
        if (ctx.machine) {
          return ctx.out.data({ url, context: name, config: path, fleet: fleet ?? null, expires_at: expiresAt });
        }
        ctx.out.line(
          `Logged in to ${url} as context '${name}' (now current${fleet ? `, fleet ${fleet}` : ""}); saved to ${path} (mode 0600).`,
        );
        if (expiresAt) ctx.out.line(`The token expires at ${expiresAt}: hm login --sso again then.`);
      }),
    );
  program.command("whoami", { hidden: true }).action(
    act(io, async (ctx) => {
      const c = ctx.connection;
      if (!c) throw new Exit(2, "no connection");
      ctx.out.line(`${c.url} (token from ${c.tokenFrom})`);
    }),
  );
}
