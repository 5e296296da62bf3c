import { Option, type Command } from "commander";
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
      ["ID", "NAME", "SCOPE", "KIND", "CREATED BY", "CREATED", "REVOKED"],
      items.map((t) => [t.id, t.name, t.scope, t.kind, t.created_by, out.time(t.created_at), out.time(t.revoked_at)]),
      "(no tokens)",
    );
  });
  tokens
    .command("list", { isDefault: true })
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
    .action(
      act(io, async (ctx, o: { name: string; scope: Scope }) => {
        const t = await ctx.api.createToken({ name: o.name, scope: o.scope });
        if (ctx.machine) return ctx.out.data(t);
        ctx.out.fields([
          ["id", t.id],
          ["scope", t.scope],
          ["token", t.token],
        ]);
        ctx.out.note(ctx.out.c.yellow("The token is shown only now."));
      }),
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
