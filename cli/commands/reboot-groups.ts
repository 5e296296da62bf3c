import { InvalidArgumentError, type Command } from "commander";
import type { RebootGroup } from "../api.ts";
import { Exit, type Io, type Output } from "../io.ts";
import { act, fleetOption } from "../context.ts";
import { safety } from "./gates.ts";
import { blockedText } from "../format.ts";

const slotsArg = (v: string) => {
  if (!/^\d+$/.test(v)) throw new InvalidArgumentError("expected a whole number");
  return Number(v);
};

/** `Sat,Sun@23:30+60[/Europe/Berlin]`: days, start, minutes, zone. */
export function windowArg(v: string, prev: unknown[] = []) {
  const m = /^([A-Za-z,]+)@(\d{2}:\d{2})\+(\d+)(?:\/(.+))?$/.exec(v);
  if (!m) throw new InvalidArgumentError("windows look like Sat,Sun@23:30+60 or Sat,Sun@23:30+60/Europe/Berlin");
  return [
    ...prev,
    { days: m[1].split(","), start_time: m[2], length_minutes: Number(m[3]), ...(m[4] ? { time_zone: m[4] } : {}) },
  ];
}

interface SetOpts {
  fleet: string;
  slots: number;
  window?: unknown[];
  windows?: boolean;
  queueWait?: number;
  unclaimedGrant?: number;
  releaseOn?: "steady_state" | "healthy_report";
  healthTimeout?: number;
  pauseOnUnhealthy?: boolean;
}

export function registerRebootGroups(program: Command, io: Io) {
  const groups = program.command("reboot-groups").description("reboot semaphores of a fleet (FleetLock)");
  const fleetOpt = (c: Command) => c.addOption(fleetOption("the fleet"));

  const list = act(io, async (ctx, o: { fleet: string }) => {
    const res = await ctx.api.listGroups(o.fleet);
    if (ctx.machine) return ctx.out.data(res.items);
    groupTable(ctx.out, res.items);
  });
  fleetOpt(groups.command("list", { isDefault: true }).description("the fleet's groups")).action(list);

  fleetOpt(groups.command("show <group>").description("one group with its holders")).action(
    act(io, async (ctx, group: string, o: { fleet: string }) => {
      const g = await ctx.api.getGroup(o.fleet, group);
      if (ctx.machine) return ctx.out.data(g);
      showGroup(ctx.out, g);
    }),
  );

  fleetOpt(
    groups
      .command("set <group>")
      .description("create or change a group live (shrinking never evicts holders)")
      .requiredOption("--slots <n>", "slots", slotsArg)
      .option("--window <spec...>", "maintenance windows, e.g. Sat,Sun@23:30+60/Europe/Berlin", windowArg)
      .option("--no-windows", "remove every window")
      .option(
        "--queue-wait <s>",
        "seconds a pre-reboot may wait for a slot, first come first served (0: refuse at once)",
        slotsArg,
      )
      .option(
        "--unclaimed-grant <s>",
        "seconds a slot granted to a host that went away is kept for its next call",
        slotsArg,
      )
      .option(
        "--release-on <rule>",
        "what frees a slot: steady_state, or healthy_report (a report from the new boot, every agent realized)",
      )
      .option("--health-timeout <s>", "healthy_report: seconds a rebooted server may take to report healthy", slotsArg)
      .option("--pause-on-unhealthy", "healthy_report: pause the group when a server misses it (the default)")
      .option("--no-pause-on-unhealthy", "healthy_report: keep granting when a server misses it"),
  ).action(
    act(io, async (ctx, group: string, o: SetOpts) => {
      const windows = o.windows === false ? [] : o.window;
      if (o.releaseOn !== undefined && o.releaseOn !== "steady_state" && o.releaseOn !== "healthy_report") {
        throw new Exit(2, "--release-on is steady_state or healthy_report");
      }
      const g = await ctx.api.putGroup(o.fleet, group, {
        slots: o.slots,
        ...(windows ? { windows: windows as never } : {}),
        ...(o.queueWait !== undefined ? { queue_wait_s: o.queueWait } : {}),
        ...(o.unclaimedGrant !== undefined ? { unclaimed_grant_s: o.unclaimedGrant } : {}),
        ...(o.releaseOn ? { release_on: o.releaseOn } : {}),
        ...(o.healthTimeout !== undefined ? { health_timeout_s: o.healthTimeout } : {}),
        ...(o.pauseOnUnhealthy !== undefined ? { pause_on_unhealthy: o.pauseOnUnhealthy } : {}),
      });
      if (ctx.machine) return ctx.out.data(g);
      showGroup(ctx.out, g);
    }),
  );

  for (const [name, paused] of [
    ["pause", true],
    ["resume", false],
  ] as const) {
    fleetOpt(
      groups.command(`${name} <group>`).description(paused ? "stop granting slots" : "grant slots again"),
    ).action(
      act(io, async (ctx, group: string, o: { fleet: string }) => {
        // The PUT needs slots; they stay as they are.
        const current = await ctx.api.getGroup(o.fleet, group);
        const g = await ctx.api.putGroup(o.fleet, group, { slots: current.slots, paused });
        if (ctx.machine) return ctx.out.data(g);
        ctx.out.line(
          `Group ${group} of ${o.fleet} ${paused ? "paused" : "resumed"} (${g.holders.length}/${g.slots} held).`,
        );
      }),
    );
  }

  fleetOpt(
    groups
      .command("dequeue <group> <id>")
      .description(
        "take a parked host out of the group's queue (audited); <id>: its FleetLock id, server id or hostname",
      ),
  ).action(
    act(io, async (ctx, group: string, id: string, o: { fleet: string }) => {
      const res = await safety(ctx).dequeue(o.fleet, group, id);
      if (ctx.machine) return ctx.out.data(res);
      ctx.out.line(
        `Took ${res.removed.id} out of the queue of ${o.fleet}/${group} (waiting since ${res.removed.waiting_since}).`,
      );
    }),
  );

  fleetOpt(
    groups
      .command("release <group> <id>")
      .description("force-release one holder's slot (audited); <id>: its FleetLock id, server id or hostname"),
  ).action(
    act(io, async (ctx, group: string, id: string, o: { fleet: string }) => {
      await ctx.confirm(
        `Release the slot '${id}' holds in ${o.fleet}/${group}? If that host is mid-reboot, another may reboot alongside it.`,
      );
      const res = await ctx.api.releaseHolder(o.fleet, group, id);
      if (ctx.machine) return ctx.out.data(res);
      ctx.out.line(`Released ${res.released.id} (held since ${res.released.granted_at}).`);
    }),
  );
}

function groupTable(out: Output, items: RebootGroup[]) {
  out.table(
    ["GROUP", "HELD", "SLOTS", "PAUSED", "WINDOWS", "OPEN NOW", "STUCK", "QUEUED"],
    items.map((g) => [
      g.name,
      g.holders.length,
      g.slots,
      g.paused ? out.c.yellow("paused") : "no",
      g.windows.length,
      g.open_now ? "yes" : out.c.yellow("no"),
      g.holders.filter((h) => h.stuck).length || null,
      g.queue.length || null,
    ]),
    "(no reboot groups)",
  );
}

function showGroup(out: Output, g: RebootGroup) {
  out.fields([
    ["group", g.name],
    ["slots", `${g.holders.length} held of ${g.slots} (${g.available_slots} available)`],
    ["paused", g.paused ? (g.paused_reason ? `yes: ${g.paused_reason}` : "yes") : "no"],
    ["hold", g.hold ? `${g.hold.reason} (by ${g.hold.by}${g.hold.until ? `, until ${g.hold.until}` : ""})` : "-"],
    [
      "release on",
      g.release_on === "healthy_report"
        ? `healthy report (within ${g.health_timeout_s}s, then ${g.pause_on_unhealthy ? "pause" : "keep going"})`
        : "steady state",
    ],
    [
      "gates",
      g.gates.length
        ? g.gates.map((v) => `${v.gate} ${v.open ? "open" : "CLOSED"}`).join(", ") + ` (${g.gates_source})`
        : "none",
    ],
    ["open now", g.open_now ? "yes" : "no"],
    ["blocked by", blockedText(g.blocked_by) ?? "-"],
    ["queue wait", g.queue_wait_s ? `${g.queue_wait_s}s` : "off (refused at once)"],
    [
      "windows",
      g.windows.map((w) => `${w.days.join(",")} ${w.start_time}+${w.length_minutes}m ${w.time_zone}`).join("; ") || "-",
    ],
    ["updated", g.updated_at],
  ]);
  out.line();
  out.table(
    ["HOLDER", "SERVER", "HOSTNAME", "SINCE", "HELD", "STUCK", "AFTER REBOOT"],
    g.holders.map((h) => [
      h.id,
      h.server?.id,
      h.server?.hostname,
      h.granted_at,
      `${h.held_for_s}s`,
      h.stuck ? out.c.red("stuck") : null,
      h.unhealthy_after_reboot ? out.c.red("unhealthy") : h.rebooted_at ? "waiting for a healthy report" : null,
    ]),
    "(no holders)",
  );
  if (g.queue.length === 0) return;
  out.line();
  out.table(
    [
      "QUEUED",
      "ID",
      "HOSTNAME",
      "WAITED",
      "CONNECTED",
      "WAITS FOR",
      { head: "SERVER", wide: true },
      { head: "WAITING SINCE", wide: true },
    ],
    g.queue.map((q) => [
      q.position,
      q.id,
      q.server?.hostname,
      `${q.waited_s}s`,
      q.connected ? "yes" : out.c.yellow("gone"),
      blockedText(q.blocked_by),
      q.server?.id,
      q.waiting_since,
    ]),
    "",
  );
}
