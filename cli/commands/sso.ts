import { Option, type Command } from "commander";
import type { Io } from "../io.ts";
import { UsageError } from "../config.ts";
import { act } from "../context.ts";
import { OPERATOR_SCOPES, type Scope } from "../../src/domain/enums.ts";

const fleetsOf = (f: "*" | string[]) => (f === "*" ? "*" : f.join(","));

export function registerSso(program: Command, io: Io) {
  const sso = program.command("sso").description("sign-in through an identity provider: who gets what");
  const mappings = sso.command("mappings").description("email or group → scope and fleets (list by default)");
  mappings
    .command("list", { isDefault: true })
    .description("list the mappings")
    .action(
      act(io, async (ctx) => {
        const { items, from_specs } = await ctx.api.listSsoMappings();
        // The JSON stays the list of mappings made here; fleet specs' rows are in each spec (hm export).
        if (ctx.machine) return ctx.out.data(items);
        ctx.out.table(
          ["ID", "KIND", "VALUE", "SCOPE", "FLEETS", "DESCRIPTION"],
          items.map((m) => [m.id, m.kind, m.value, m.scope, fleetsOf(m.fleets), m.description]),
          from_specs.length ? "(no mappings made here)" : "(no mappings: nobody can sign in through SSO)",
        );
        if (from_specs.length === 0) return;
        ctx.out.line("");
        ctx.out.line("From fleet specs (access:, each on its own fleet only; change them by applying the spec):");
        ctx.out.table(
          ["FLEET", "KIND", "VALUE", "SCOPE"],
          from_specs.map((m) => [m.fleet, m.kind, m.value, m.scope]),
          "",
        );
      }),
    );
  mappings
    .command("add")
    .description("map an email or a group to a scope on some fleets")
    .addOption(new Option("--email <email>", "a user's email").conflicts("group"))
    .addOption(new Option("--group <group>", "a group, as the identity provider spells it"))
    .addOption(new Option("--scope <scope>", "read < write < admin").choices(OPERATOR_SCOPES).default("read"))
    .requiredOption("--fleet <fleet...>", 'the fleets (repeat, or "*" for every fleet)')
    .option("--description <text>", "why")
    .action(
      act(
        io,
        async (ctx, o: { email?: string; group?: string; scope: Scope; fleet: string[]; description?: string }) => {
          if (!o.email && !o.group) throw new UsageError("--email or --group is required");
          const m = await ctx.api.createSsoMapping({
            kind: o.email ? "email" : "group",
            value: (o.email ?? o.group)!,
            scope: o.scope,
            fleets: o.fleet.includes("*") ? "*" : o.fleet,
            ...(o.description ? { description: o.description } : {}),
          });
          if (ctx.machine) return ctx.out.data(m);
          ctx.out.line(`Mapped ${m.kind} ${m.value} to ${m.scope} on ${fleetsOf(m.fleets)} (${m.id}).`);
        },
      ),
    );
  mappings
    .command("remove <id>")
    .description("remove a mapping (sessions already open keep their grant until they end)")
    .action(
      act(io, async (ctx, id: string) => {
        const m = await ctx.api.deleteSsoMapping(id);
        if (ctx.machine) return ctx.out.data(m);
        ctx.out.line(`Removed the mapping of ${m.kind} ${m.value}.`);
      }),
    );

  const sessions = program.command("sessions").description("active SSO sessions (list by default)");
  sessions
    .command("list", { isDefault: true })
    .alias("ls")
    .description("list the active SSO sessions, console and hm")
    .action(
      act(io, async (ctx) => {
        const { items } = await ctx.api.listSsoSessions();
        if (ctx.machine) return ctx.out.data(items);
        const out = ctx.out;
        out.table(
          ["TOKEN", "USER", "VIA", "CLIENT", "SCOPE", "FLEETS", "STARTED", "EXPIRES"],
          items.map((s) => [
            s.token_id,
            s.email ?? s.subject,
            s.provider,
            s.client,
            s.scope,
            fleetsOf(s.fleets),
            out.time(s.created_at),
            out.time(s.expires_at),
          ]),
          "(no active sessions)",
        );
      }),
    );
  sessions
    .command("end <token-id>")
    .description("end a session: its token is revoked, its console pages and live sockets close")
    .action(
      act(io, async (ctx, id: string) => {
        await ctx.confirm(`End session ${id}? Its user is signed out everywhere it is used.`);
        const ended = await ctx.api.endSsoSession(id);
        if (ctx.machine) return ctx.out.data(ended);
        ctx.out.line(`Ended session ${ended.token_id}.`);
      }),
    );
}
