import { InvalidArgumentError, Option, type Command } from "commander";
import type { Api, ServerDetail, ServerPatch, ServerStatus, ServerSummary } from "../api.ts";
import { Exit, type Io, type Output } from "../io.ts";
import { act, fleetOption } from "../context.ts";
import { SERVER_KINDS, SERVER_STATES, SERVER_STATUSES } from "../../src/domain/enums.ts";

type ServerState = ServerSummary["state"];

/**
 * Rows a list reads from their own ledgers for the exact last report (the console does the same):
 * the index refreshes last_seen only when something changes or its lease runs out, so its figure
 * may be hours old for a server that reported seconds ago.
 */
const EXACT_READS = 50;
/** Ledger reads in flight at once. */
const EXACT_PARALLEL = 8;

/** Each listed server's last report as its ledger has it; a server that cannot be read keeps the index's. */
async function lastReports(api: Api, items: ServerSummary[]): Promise<Map<string, string | null>> {
  const found = new Map<string, string | null>();
  let next = 0;
  const worker = async () => {
    while (next < items.length) {
      const s = items[next++];
      try {
        found.set(s.id, (await api.getServer(s.id)).last_seen);
      } catch {
        // Removed or out of reach since the list was read: the index's figure stands.
      }
    }
  };
  await Promise.all(Array.from({ length: Math.min(EXACT_PARALLEL, items.length) }, worker));
  return found;
}

const collect = (v: string, prev: string[] = []) => [...prev, v];

/** `--label zone=eu-1a` (repeatable) as a labels object; the API checks keys and values. */
export function labelsOf(pairs: string[] | undefined): Record<string, string> | undefined {
  if (!pairs) return undefined;
  const out: Record<string, string> = {};
  for (const p of pairs) {
    const at = p.indexOf("=");
    if (at <= 0) throw new Exit(2, `--label ${p}: expected key=value`);
    out[p.slice(0, at)] = p.slice(at + 1);
  }
  return out;
}

/** Labels as one cell: `rack=r12,zone=eu-1a`. */
const labelsText = (labels: Record<string, string> | undefined) =>
  Object.entries(labels ?? {})
    .map(([k, v]) => `${k}=${v}`)
    .join(",") || null;

export function registerServers(program: Command, io: Io) {
  const servers = program
    .command("servers")
    .description("servers (list by default); a server is named by id, hostname or fleet/hostname");
  const list = act(
    io,
    async (
      ctx,
      o: {
        fleet?: string;
        status?: ServerStatus;
        state?: ServerState;
        hostname?: string;
        label?: string[];
        limit?: number;
      },
    ) => {
      const items = await ctx.api.listServers(
        { fleet: o.fleet, status: o.status, state: o.state, hostname: o.hostname, label: o.label },
        o.limit,
      );
      if (ctx.machine) return ctx.out.data(items);
      const out = ctx.out;
      const exact = items.length <= EXACT_READS ? await lastReports(ctx.api, items) : null;
      out.table(
        [
          "HOSTNAME",
          "FLEET",
          "STATE",
          "STATUS",
          "GEN",
          "REPORTED",
          "LAST SEEN",
          "LABELS",
          { head: "ID", wide: true },
          { head: "KIND", wide: true },
          { head: "ROLES", wide: true },
          { head: "REBOOT GROUP", wide: true },
        ],
        // The API pages in natural order (sim-2 before sim-10), across pages too: shown as it comes.
        items.map((s) => [
          s.hostname,
          s.fleet,
          s.state,
          out.status(s.status),
          s.desired_generation,
          s.reported_generation,
          exact?.has(s.id) ? out.time(exact.get(s.id)) : out.time(s.last_seen),
          labelsText(s.labels),
          s.id,
          s.kind,
          s.roles.join(",") || null,
          s.reboot_group,
        ]),
        "(no servers)",
      );
      if (!exact && items.length)
        out.note(
          out.c.dim(
            `(LAST SEEN for more than ${EXACT_READS} servers is the index's, refreshed only when something ` +
              "changes or a day has passed; hm servers show S has the exact time)",
          ),
        );
    },
  );
  const filters = (c: Command) =>
    c
      .option("--fleet <fleet>", "only this fleet")
      .addOption(new Option("--status <status>", "only this status").choices(SERVER_STATUSES))
      .addOption(
        new Option("--state <state>", "only this state (removed servers are listed only so)").choices(SERVER_STATES),
      )
      .option("--hostname <name>", "this hostname, or a prefix ending in * (node-1*)")
      .option(
        "--label <key[=value]>",
        "only servers with this label (zone=eu-1a) or label key (zone); repeatable, all must hold",
        collect,
      )
      .option("--limit <n>", "at most this many", (v) => {
        const n = Number(v);
        if (!Number.isInteger(n) || n < 1) throw new InvalidArgumentError("expected a positive whole number");
        return n;
      });
  filters(
    servers
      .command("list", { isDefault: true })
      .alias("ls")
      .description("search servers by hostname, status, state and labels (from the fleet-wide index)"),
  ).action(list);

  servers
    .command("show <server>")
    .description("a server: desired config, last report, status per agent (from its ledger)")
    .action(
      act(io, async (ctx, id: string) => {
        const s = await ctx.api.getServer(id);
        if (ctx.machine) return ctx.out.data(s);
        showServer(ctx.out, s);
      }),
    );

  servers
    .command("register")
    .description("register a server; prints its token once")
    .addOption(fleetOption("its fleet"))
    .requiredOption("--hostname <name>", "its hostname")
    .addOption(
      new Option("--kind <kind>", "managed (provisioned for us) or manual (borrowed)")
        .choices(SERVER_KINDS)
        .default("managed"),
    )
    .option("--role <role...>", "roles")
    .option("--reboot-group <group>", "reboot group")
    .option("--fleetlock-id <id>", "the id its FleetLock client (Zincati) sends")
    .option("--label <key=value>", "a label (repeatable)", collect)
    .action(
      act(io, async (ctx, o) => {
        const s = await ctx.api.registerServer({
          fleet: o.fleet,
          hostname: o.hostname,
          kind: o.kind,
          roles: o.role,
          reboot_group: o.rebootGroup,
          fleetlock_id: o.fleetlockId,
          labels: labelsOf(o.label),
        });
        if (ctx.machine) return ctx.out.data(s);
        ctx.out.fields([
          ["id", s.id],
          ["hostname", s.hostname],
          ["fleet", s.fleet],
          ["token", s.token],
        ]);
        ctx.out.note(
          ctx.out.c.yellow("The token is shown only now: put it on the host (its agent authenticates with it)."),
        );
      }),
    );

  registerDecommission(servers, io);

  servers
    .command("patch <server>")
    .description(
      "change a server's FleetLock id, reboot group, roles (new roles re-plan it unless pinned) and/or labels (merged)",
    )
    .option("--fleetlock-id <id>", "new FleetLock id")
    .option("--clear-fleetlock-id", "remove its FleetLock id")
    .option("--reboot-group <group>", "new reboot group")
    .option("--role <role...>", "its roles (replaced)")
    .option("--clear-roles", "no roles")
    .option("--label <key=value>", "set this label, keeping the others (repeatable)", collect)
    .option("--unlabel <key>", "remove this label (repeatable)", collect)
    .action(
      act(io, async (ctx, id: string, o) => {
        const patch: ServerPatch = {};
        if (o.fleetlockId !== undefined && o.clearFleetlockId)
          throw new Exit(2, "--fleetlock-id and --clear-fleetlock-id exclude each other");
        if (o.role !== undefined && o.clearRoles) throw new Exit(2, "--role and --clear-roles exclude each other");
        if (o.fleetlockId !== undefined) patch.fleetlock_id = o.fleetlockId;
        if (o.clearFleetlockId) patch.fleetlock_id = null;
        if (o.rebootGroup !== undefined) patch.reboot_group = o.rebootGroup;
        if (o.role !== undefined) patch.roles = o.role;
        if (o.clearRoles) patch.roles = [];
        if (o.label || o.unlabel) {
          const labels: Record<string, string | null> = { ...labelsOf(o.label) };
          for (const k of (o.unlabel ?? []) as string[]) {
            if (k in labels) throw new Exit(2, `--label ${k}=… and --unlabel ${k} exclude each other`);
            labels[k] = null;
          }
          patch.labels = labels;
        }
        if (Object.keys(patch).length === 0)
          throw new Exit(
            2,
            "nothing to change: pass --fleetlock-id, --clear-fleetlock-id, --reboot-group, --role, --clear-roles, --label or --unlabel",
          );
        const s = await ctx.api.patchServer(id, patch);
        if (ctx.machine) return ctx.out.data(s);
        ctx.out.line(
          `Server ${s.hostname}: fleetlock_id ${s.fleetlock_id ?? "-"}, reboot group ${s.reboot_group}, roles ${s.roles.join(", ") || "-"}, labels ${labelsText(s.labels) ?? "-"} (generation ${s.desired_generation}).`,
        );
      }),
    );

  servers
    .command("refresh <server>")
    .description("ask the server's host to report now")
    .action(
      act(io, async (ctx, id: string) => {
        const s = await ctx.api.refreshServer(id);
        if (ctx.machine) return ctx.out.data(s);
        ctx.out.line(`Asked ${s.hostname} to report (requested ${ctx.out.time(s.refresh?.requested_at)}).`);
      }),
    );

  servers
    .command("rotate-token <server>")
    .description("a new token for the server, shown once; the old one stops at once")
    .action(
      act(io, async (ctx, id: string) => {
        await ctx.confirm(`Rotate the token of server ${id}? Its host is refused until it has the new one.`);
        const t = await ctx.api.rotateServerToken(id);
        if (ctx.machine) return ctx.out.data(t);
        ctx.out.fields([
          ["id", t.id],
          ["token", t.token],
        ]);
        ctx.out.note(ctx.out.c.yellow("The token is shown only now: put it on the host."));
      }),
    );
}

function registerDecommission(servers: Command, io: Io) {
  servers
    .command("decommission <server>")
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
        if (ctx.machine) return ctx.out.data(s);
        ctx.out.line(decommissionSays(s, ctx.out));
      }),
    );
}

/** What a decommission (or its cancel, or a forced removal) left the server as, in words. */
function decommissionSays(s: ServerDetail, out: Output): string {
  const who = `Server ${s.hostname} (${s.id})`;
  const l = s.lifecycle;
  if (s.state === "removed")
    return `${who} is removed${l?.forced ? ` (forced by ${l.forced.by}: ${l.forced.reason})` : ""}; cleanup done: ${l?.cleanup_done.join(", ") || "-"}.`;
  if (l?.forced)
    return `${who} is being removed (forced by ${l.forced.by}: ${l.forced.reason}); cleanup so far: ${l.cleanup_done.join(", ") || "none"}.`;
  if (s.state === "decommissioning" && l) {
    return `${who} is decommissioning: generation ${l.generation} orders ${l.order}; it is removed once its host acknowledges (requested ${out.time(l.requested_at)}).`;
  }
  return `${who} is ${s.state}; generation ${s.desired_generation} orders ${s.desired.lifecycle} with ${s.desired.agents.length} agent(s).`;
}

function showServer(out: Output, s: ServerDetail) {
  out.fields([
    ["id", s.id],
    ["hostname", s.hostname],
    ["fleet", s.fleet],
    ["kind", s.kind],
    ["roles", s.roles.join(", ") || "-"],
    ["labels", labelsText(s.labels) ?? "-"],
    ["state", s.state],
    ["status", out.status(s.status)],
    ["desired generation", `${s.desired_generation} (${s.desired.lifecycle})`],
    ["reported generation", s.reported_generation],
    ["last seen", out.time(s.last_seen)],
    [
      "planning",
      s.planning.mode === "pinned"
        ? `pinned by ${s.planning.pinned_by} ${out.time(s.planning.pinned_at)} (hm desired release ${s.hostname})`
        : "planned",
    ],
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
