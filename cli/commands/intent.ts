/**
 * The fleet's intent from the command line (docs/operator-guide.md): agent channels (the image the fleet
 * wants per agent, with history) and role profiles (which agents a role runs, each optionally
 * when a capability holds).
 */
import type { Command } from "commander";
import type { Role } from "../api.ts";
import type { Io } from "../io.ts";
import { act, fleetOption } from "../context.ts";

const fleetOpt = (c: Command) => c.addOption(fleetOption("the fleet"));
const collect = (v: string, prev: string[] = []) => [...prev, v];

/** `fw-agent@firewall`, `fw-agent@!object_storage` or just `base`. */
const roleAgent = (spec: string) => {
  const [name, when] = spec.split("@");
  return when ? { name, when } : { name };
};
const agentsOf = (r: Pick<Role, "agents">) =>
  r.agents.map((a) => (a.when ? `${a.name}@${a.when}` : a.name)).join(", ") || "-";

export function registerIntent(program: Command, io: Io) {
  const channels = program
    .command("channels")
    .description("agent channels: the image a fleet wants per agent (list by default)");
  fleetOpt(channels.command("list", { isDefault: true }).description("the fleet's channels")).action(
    act(io, async (ctx, o: { fleet: string }) => {
      const items = await ctx.api.listChannels(o.fleet);
      if (ctx.machine) return ctx.out.data(items);
      const out = ctx.out;
      out.table(
        ["AGENT", "IMAGE", "VERSION", "UPDATED", { head: "BY", wide: true }],
        items.map((c) => [c.agent, c.image, c.version, out.time(c.updated_at), c.updated_by]),
        "(no channels)",
      );
    }),
  );
  fleetOpt(channels.command("show <agent>").description("one channel with its latest changes")).action(
    act(io, async (ctx, agent: string, o: { fleet: string }) => {
      const c = await ctx.api.getChannel(o.fleet, agent);
      if (ctx.machine) return ctx.out.data(c);
      const out = ctx.out;
      out.fields([
        ["agent", c.agent],
        ["image", c.image],
        ["version", c.version],
        ["updated", out.time(c.updated_at)],
        ["by", c.updated_by],
      ]);
      out.line();
      out.table(
        ["AT", "IMAGE", "VERSION", "FROM", "BY"],
        c.history.map((h) => [out.time(h.at), h.image, h.version, h.previous?.image, h.actor]),
        "(no history)",
      );
    }),
  );
  fleetOpt(
    channels
      .command("set <agent>")
      .description("the image the fleet wants for an agent (new servers get it; running ones move only by a rollout)")
      .requiredOption("--image <image>", "image reference")
      .requiredOption("--version <version>", "its version"),
  ).action(
    act(io, async (ctx, agent: string, o: { fleet: string; image: string; version: string }) => {
      const c = await ctx.api.putChannel(o.fleet, agent, { image: o.image, version: o.version });
      if (ctx.machine) return ctx.out.data(c);
      ctx.out.line(
        c.changed
          ? `Channel ${agent} of ${o.fleet} now ${c.image} (${c.version}).`
          : `Channel ${agent} of ${o.fleet} already ${c.image}.`,
      );
    }),
  );

  const roles = program.command("roles").description("role profiles: the agents each role runs (list by default)");
  fleetOpt(roles.command("list", { isDefault: true }).description("the fleet's roles")).action(
    act(io, async (ctx, o: { fleet: string }) => {
      const items = await ctx.api.listRoles(o.fleet);
      if (ctx.machine) return ctx.out.data(items);
      const out = ctx.out;
      out.table(
        ["ROLE", "AGENTS", "UPDATED", { head: "BY", wide: true }],
        items.map((r) => [r.role, agentsOf(r), out.time(r.updated_at), r.updated_by]),
        "(no roles)",
      );
    }),
  );
  fleetOpt(roles.command("show <role>").description("one role")).action(
    act(io, async (ctx, role: string, o: { fleet: string }) => {
      const r = await ctx.api.getRole(o.fleet, role);
      if (ctx.machine) return ctx.out.data(r);
      ctx.out.fields([
        ["role", r.role],
        ["agents", agentsOf(r)],
        ["updated", ctx.out.time(r.updated_at)],
        ["by", r.updated_by],
      ]);
    }),
  );
  fleetOpt(
    roles
      .command("set <role>")
      .description("set a role's agents (the fleet's servers with the role are re-planned)")
      .requiredOption(
        "--agent <name[@capability]>",
        "an agent, optionally only when a capability holds (fw@firewall, x@!storage); repeatable",
        collect,
      ),
  ).action(
    act(io, async (ctx, role: string, o: { fleet: string; agent: string[] }) => {
      const r = await ctx.api.putRole(o.fleet, role, { agents: o.agent.map(roleAgent) });
      if (ctx.machine) return ctx.out.data(r);
      const p = r.planning;
      const planned = p
        ? ` Planned ${p.servers} server(s): ${p.issued} issued, ${p.failed} failed, ${p.remaining} remaining.`
        : "";
      ctx.out.line(`Role ${role} of ${o.fleet}: ${agentsOf(r)}.${planned}`);
    }),
  );
  fleetOpt(
    roles.command("delete <role>").description("delete a role (servers with it are re-planned without it)"),
  ).action(
    act(io, async (ctx, role: string, o: { fleet: string }) => {
      await ctx.confirm(`Delete role ${role} of ${o.fleet}? Its servers are re-planned without its agents.`);
      await ctx.api.deleteRole(o.fleet, role);
      // The API answers 204: scripts get what was deleted.
      if (ctx.machine) return ctx.out.data({ fleet: o.fleet, name: role, deleted: true }, () => role);
      ctx.out.line(`Deleted role ${role} of ${o.fleet}.`);
    }),
  );
}
