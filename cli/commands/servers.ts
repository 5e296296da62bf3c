import { InvalidArgumentError, Option, type Command } from "commander";
import type { ServerDetail, ServerPatch, ServerStatus } from "../api.ts";
import { Exit, type Io, type Output } from "../io.ts";
import { act } from "../context.ts";

const STATUSES = ["realized", "pending", "failed", "drifted", "unknown", "stale"];

export function registerServers(program: Command, io: Io) {
  const servers = program.command("servers").description("servers (list by default)");
  const list = act(io, async (ctx, o: { fleet?: string; status?: ServerStatus; limit?: number }) => {
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

  registerDecommission(servers, io);

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

export function registerDecommission(servers: Command, io: Io) {
  servers
    .command("decommission <id>")
    .description("terminate (managed) or uninstall (manual) a server; it is removed once its host acknowledges")
    .option("--force", "remove a dead host now, without its acknowledgement (admin; needs --reason)")
    .option("--reason <text>", "why (audited; required with --force)")
    .option("--cancel", "cancel a decommission the host has not acknowledged")
    .action(
      act(io, async (ctx, id: string, o: { force?: boolean; reason?: string; cancel?: boolean }) => {
        if (o.force && !o.reason) throw new Exit(2, "--force needs --reason");
        if (o.cancel && o.force) throw new Exit(2, "--cancel and --force exclude each other");
        let s: ServerDetail;
        if (o.cancel) s = await ctx.api.cancelDecommission(id);
        else {
          await ctx.confirm(
            o.force
              ? `Remove server ${id} now, without its host's acknowledgement? Its agents are forgotten and its token revoked.`
              : `Decommission server ${id}? Its host is ordered to stop (managed) or uninstall (manual) its agents.`,
          );
          s = await ctx.api.decommission(id, { force: !!o.force, reason: o.reason });
        }
        if (ctx.globals.json) return ctx.out.data(s);
        ctx.out.line(`Server ${s.id} (${s.hostname}) is ${s.state}; desired generation ${s.desired_generation} orders ${s.desired.lifecycle}.`);
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
