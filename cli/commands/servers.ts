import { InvalidArgumentError, Option, type Command } from "commander";
import type { ServerDetail, ServerPatch } from "../api";
import { Exit, type Io, type Output } from "../io";
import { act } from "../main";

const STATUSES = ["realized", "pending", "failed", "drifted", "unknown", "stale"];

export function registerServers(program: Command, io: Io) {
  const servers = program.command("servers").description("servers (list by default)");
  const list = act(io, async (ctx, o: { fleet?: string; status?: string; limit?: number }) => {
    const items = await ctx.api.listServers({ fleet: o.fleet, status: o.status }, o.limit);
    if (ctx.globals.json) return ctx.out.data(items);
    const out = ctx.out;
    out.table(
      ["ID", "FLEET", "HOSTNAME", "STATE", "STATUS", "GEN", "REPORTED", "LAST SEEN"],
      items.map((s) => [s.id, s.fleet, s.hostname, s.state, out.status(s.status), s.desired_generation, s.reported_generation, s.last_seen]),
      "(no servers)",
    );
  });
  const filters = (c: Command) =>
    c
      .option("--fleet <fleet>", "only this fleet")
      .addOption(new Option("--status <status>", "only this status").choices(STATUSES))
      .option("--limit <n>", "at most this many", (v) => {
        const n = Number(v);
        if (!Number.isInteger(n) || n < 1) throw new InvalidArgumentError("expected a positive whole number");
        return n;
      });
  filters(servers.command("list", { isDefault: true }).description("search servers (from the fleet-wide index)")).action(list);

  servers
    .command("show <id>")
    .description("a server: desired config, last report, status per agent (from its ledger)")
    .action(
      act(io, async (ctx, id: string) => {
        const s = await ctx.api.getServer(id);
        if (ctx.globals.json) return ctx.out.data(s);
        showServer(ctx.out, s);
      }),
    );

  servers
    .command("register")
    .description("register a server; prints its token once")
    .requiredOption("--fleet <fleet>", "its fleet")
    .requiredOption("--hostname <name>", "its hostname")
    .addOption(new Option("--kind <kind>", "managed (provisioned for us) or manual (borrowed)").choices(["managed", "manual"]).default("managed"))
    .option("--role <role...>", "roles")
    .option("--reboot-group <group>", "reboot group")
    .option("--fleetlock-id <id>", "the id its FleetLock client (Zincati) sends")
    .action(
      act(io, async (ctx, o) => {
        const s = await ctx.api.registerServer({
          fleet: o.fleet,
          hostname: o.hostname,
          kind: o.kind,
          roles: o.role,
          reboot_group: o.rebootGroup,
          fleetlock_id: o.fleetlockId,
        });
        if (ctx.globals.json) return ctx.out.data(s);
        ctx.out.fields([
          ["id", s.id],
          ["hostname", s.hostname],
          ["fleet", s.fleet],
          ["token", s.token],
        ]);
        ctx.out.note(ctx.out.c.yellow("The token is shown only now: put it on the host (its agent authenticates with it)."));
      }),
    );

  servers
    .command("patch <id>")
    .description("change a server's FleetLock id and/or reboot group")
    .option("--fleetlock-id <id>", "new FleetLock id")
    .option("--clear-fleetlock-id", "remove its FleetLock id")
    .option("--reboot-group <group>", "new reboot group")
    .action(
      act(io, async (ctx, id: string, o) => {
        const patch: ServerPatch = {};
        if (o.fleetlockId !== undefined && o.clearFleetlockId) throw new Exit(2, "--fleetlock-id and --clear-fleetlock-id exclude each other");
        if (o.fleetlockId !== undefined) patch.fleetlock_id = o.fleetlockId;
        if (o.clearFleetlockId) patch.fleetlock_id = null;
        if (o.rebootGroup !== undefined) patch.reboot_group = o.rebootGroup;
        if (Object.keys(patch).length === 0) throw new Exit(2, "nothing to change: pass --fleetlock-id, --clear-fleetlock-id or --reboot-group");
        const s = await ctx.api.patchServer(id, patch);
        if (ctx.globals.json) return ctx.out.data(s);
        ctx.out.line(`Server ${s.id}: fleetlock_id ${s.fleetlock_id ?? "-"}, reboot group ${s.reboot_group}.`);
      }),
    );
}

export function showServer(out: Output, s: ServerDetail) {
  out.fields([
    ["id", s.id],
    ["hostname", s.hostname],
    ["fleet", s.fleet],
    ["kind", s.kind],
    ["roles", s.roles.join(", ") || "-"],
    ["state", s.state],
    ["status", out.status(s.status)],
    ["desired generation", `${s.desired_generation} (${s.desired.lifecycle})`],
    ["reported generation", s.reported_generation],
    ["last seen", s.last_seen],
    ["boot id", s.report?.boot_id],
    ["reboot group", s.reboot_group],
    ["fleetlock id", s.fleetlock_id],
  ]);
  out.line();
  out.table(
    ["AGENT", "STATUS", "DESIRED", "REPORTED", "STATE", "ERRORS"],
    s.agents.map((a) => [
      a.name,
      out.status(a.status),
      a.desired?.image,
      a.reported?.image,
      a.reported?.state,
      a.errors.map((e) => `${e.op}: ${e.message}`).join("; ") || null,
    ]),
    "(no agents)",
  );
}
