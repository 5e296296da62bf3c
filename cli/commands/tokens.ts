import { InvalidArgumentError, Option, type Command } from "commander";
import { parseDuration } from "../format.ts";
import type { Io } from "../io.ts";
import { act } from "../context.ts";
import { OPERATOR_SCOPES, TOKEN_KINDS, type Scope, type TokenKind } from "../../src/domain/enums.ts";

export function registerTokens(program: Command, io: Io) {
  const tokens = program.command("tokens").description("operator tokens (list by default)");
  const list = act(io, async (ctx, o: { kind: TokenKind | "all" }) => {
    const items = await ctx.api.listTokens(o.kind === "all" ? undefined : o.kind);
    if (ctx.machine) return ctx.out.data(items);
    const out = ctx.out;
    out.table(
      ["ID", "NAME", "SCOPE", "FLEETS", "STATE", "EXPIRES", "KIND", "CREATED BY", "CREATED", "DESCRIPTION"],
      items.map((t) => [
        t.id,
        t.name,
        t.scope,
        t.fleets === "*" ? "*" : t.fleets.join(","),
        t.state,
        out.time(t.expires_at),
        t.kind,
        t.created_by,
        out.time(t.created_at),
        t.description ?? "",
      ]),
      "(no tokens)",
    );
  });
  tokens
    .command("list", { isDefault: true })
    .alias("ls")
    .description("list tokens (operator tokens unless --kind says otherwise: a fleet has a server token per server)")
    .addOption(
      new Option("--kind <kind>", "operator, server or all").choices([...TOKEN_KINDS, "all"]).default("operator"),
    )
    .action(list);
  tokens
    .command("create")
    .description("create an operator token; prints it once")
    .requiredOption("--name <name>", "what it is for")
    .addOption(new Option("--scope <scope>", "read < write < admin").choices(OPERATOR_SCOPES).default("read"))
    .option(
      "--fleet <fleet>",
      "a fleet it may act on (repeat for more); default: the fleets of the token creating it",
      (v: string, prev: string[] = []) => [...prev, v],
    )
    .option("--all-fleets", 'every fleet, present and future ("*")')
    .option("--expires <duration>", "how long it lives (e.g. 8h, 30d); default: never, or when the creating token does")
    .option("--description <text>", "what it is for, for whoever reads the token list")
    .action(
      act(
        io,
        async (
          ctx,
          o: {
            name: string;
            scope: Scope;
            fleet?: string[];
            allFleets?: boolean;
            expires?: string;
            description?: string;
          },
        ) => {
          if (o.fleet && o.allFleets) throw new InvalidArgumentError("--fleet and --all-fleets exclude each other");
          let expiresAt: string | undefined;
          if (o.expires !== undefined) {
            try {
              expiresAt = new Date(Date.now() + parseDuration(o.expires) * 1000).toISOString();
            } catch (err) {
              throw new InvalidArgumentError(`--expires: ${(err as Error).message}`);
            }
          }
          const t = await ctx.api.createToken({
            name: o.name,
            scope: o.scope,
            fleets: o.allFleets ? "*" : o.fleet,
            expires_at: expiresAt,
            description: o.description,
          });
          if (ctx.machine) return ctx.out.data(t);
          ctx.out.fields([
            ["id", t.id],
            ["scope", t.scope],
            ["fleets", t.fleets === "*" ? "* (every fleet)" : t.fleets.join(", ")],
            ["expires", t.expires_at ? ctx.out.time(t.expires_at) : "never"],
            ["token", t.token],
          ]);
          ctx.out.note(ctx.out.c.yellow("The token is shown only now."));
        },
      ),
    );
  tokens
    .command("revoke <id>")
    .description("revoke a token (immediately)")
    .action(
      act(io, async (ctx, id: string) => {
        await ctx.confirm(`Revoke token ${id}? Whoever uses it is refused from now on.`);
        const t = await ctx.api.revokeToken(id);
        if (ctx.machine) return ctx.out.data(t);
        ctx.out.line(`Revoked ${t.id} (${t.name}).`);
      }),
    );
}
