import { InvalidArgumentError, type Command } from "commander";
import { act, fleetOption, type Ctx } from "../context.ts";
import type { Io, Output } from "../io.ts";
import { safetyApi, type GateConfig } from "../safety-api.ts";

const whole = (v: string) => {
  if (!/^\d+$/.test(v)) throw new InvalidArgumentError("expected a whole number");
  return Number(v);
};
const percent = (v: string) => {
  const n = Number(v);
  if (!Number.isFinite(n) || n < 0 || n > 100) throw new InvalidArgumentError("expected a share from 0 to 100");
  return n;
};
/** 90s, 30m, 2h, 1d (or plain seconds). */
function duration(v: string) {
  const m = /^(\d+)([smhd]?)$/.exec(v.trim());
  if (!m) throw new InvalidArgumentError("durations look like 90s, 30m, 2h or 1d");
  return Number(m[1]) * { "": 1, s: 1, m: 60, h: 3600, d: 86400 }[m[2] as "" | "s" | "m" | "h" | "d"];
}

export const safety = (ctx: Ctx) => safetyApi(ctx.connection, ctx.io.fetch ?? ((i, init) => fetch(i, init)));

interface GateOpts {
  fleet: string;
  group?: string;
  maxUnhealthy?: number;
  maxUnhealthyPercent?: number;
  rollouts?: boolean;
  maxRebootedUnhealthy?: number;
  external?: string;
  externalTimeout?: number;
  externalCache?: number;
  externalFailOpen?: boolean;
  none?: boolean;
  inherit?: boolean;
}

function gatesOf(o: GateOpts): GateConfig {
  if (o.none) return {};
  const health = o.maxUnhealthy !== undefined || o.maxUnhealthyPercent !== undefined;
  return {
    ...(health
      ? {
          fleet_health: { max_unhealthy: o.maxUnhealthy ?? null, max_unhealthy_percent: o.maxUnhealthyPercent ?? null },
        }
      : {}),
    ...(o.rollouts ? { rollouts: true } : {}),
    ...(o.maxRebootedUnhealthy !== undefined ? { max_rebooted_unhealthy: o.maxRebootedUnhealthy } : {}),
    ...(o.external
      ? {
          external: {
            url: o.external,
            timeout_s: o.externalTimeout ?? 5,
            cache_s: o.externalCache ?? 60,
            fail_open: !!o.externalFailOpen,
          },
        }
      : {}),
  };
}

export function registerGates(program: Command, io: Io) {
  const gates = program
    .command("gates")
    .description("health gates: what must hold before a reboot group grants a new slot");
  gates
    .command("show", { isDefault: true })
    .description("the fleet's default gates and hold, and what each group's gates say now")
    .addOption(fleetOption("the fleet"))
    .action(
      act(io, async (ctx, o: { fleet: string }) => {
        const g = await safety(ctx).gates(o.fleet);
        if (ctx.machine) return ctx.out.data(g);
        showGates(ctx.out, g);
      }),
    );

  gates
    .command("set")
    .description(
      "set the fleet's default gates (or, with --group, one group's own); the options given replace the gates",
    )
    .addOption(fleetOption("the fleet"))
    .option("--group <group>", "set this group's own gates instead of the fleet's default")
    .option("--max-unhealthy <n>", "hold while more failed + stale servers than this", whole)
    .option("--max-unhealthy-percent <p>", "hold while more than this share of servers is failed or stale", percent)
    .option("--rollouts", "hold while a rollout runs in the fleet")
    .option(
      "--max-rebooted-unhealthy <n>",
      "hold while more servers than this rebooted and have not reported healthy",
      whole,
    )
    .option("--external <url>", "hold unless this HTTPS URL answers 2xx")
    .option("--external-timeout <s>", "the check's time limit (default 5)", whole)
    .option("--external-cache <s>", "how long an answer counts (default 60)", whole)
    .option("--external-fail-open", "let grants through when the URL cannot be reached")
    .option("--none", "no gates")
    .option("--inherit", "with --group: follow the fleet's default again")
    .action(
      act(io, async (ctx, o: GateOpts) => {
        if (o.group) {
          const current = await ctx.api.getGroup(o.fleet, o.group);
          const g = await ctx.api.putGroup(o.fleet, o.group, {
            slots: current.slots,
            gates: o.inherit ? null : gatesOf(o),
          });
          if (ctx.machine) return ctx.out.data(g);
          ctx.out.line(
            `Group ${o.group} of ${o.fleet}: ${g.gates_source === "group" ? "its own gates" : g.gates_source === "fleet" ? "the fleet's gates" : "no gates"}.`,
          );
          return verdicts(ctx.out, g.gates);
        }
        const g = await safety(ctx).putGates(o.fleet, gatesOf(o));
        if (ctx.machine) return ctx.out.data(g);
        showGates(ctx.out, g);
      }),
    );

  program
    .command("hold [group]")
    .description("hold a reboot group (or, without one, every group of the fleet): no new grants, granted slots stay")
    .addOption(fleetOption("the fleet"))
    .requiredOption("--reason <text>", "why (shown to hosts, operators and in the audit log)")
    .option("--for <duration>", "lift it by itself after this long, e.g. 2h", duration)
    .option("--until <time>", "lift it by itself at this time (ISO 8601)")
    .action(
      act(
        io,
        async (ctx, group: string | undefined, o: { fleet: string; reason: string; for?: number; until?: string }) => {
          const body = { reason: o.reason, ...(o.for ? { for_s: o.for } : {}), ...(o.until ? { until: o.until } : {}) };
          const res = group
            ? await safety(ctx).holdGroup(o.fleet, group, body)
            : await safety(ctx).holdFleet(o.fleet, body);
          if (ctx.machine) return ctx.out.data(res);
          ctx.out.line(
            `${group ? `Group ${group}` : "Every group"} of ${o.fleet} held${res.hold?.until ? ` until ${res.hold.until}` : ""}: ${o.reason}`,
          );
        },
      ),
    );

  program
    .command("unhold [group]")
    .description("lift a reboot group's hold (or, without one, the fleet-wide hold)")
    .addOption(fleetOption("the fleet"))
    .action(
      act(io, async (ctx, group: string | undefined, o: { fleet: string }) => {
        const res = group ? await safety(ctx).unholdGroup(o.fleet, group) : await safety(ctx).unholdFleet(o.fleet);
        if (ctx.machine) return ctx.out.data(res);
        ctx.out.line(`${group ? `Group ${group}` : "The fleet"} of ${o.fleet} is no longer held.`);
      }),
    );
}

type Verdict = { gate: string; open: boolean; kind: string; reason: string };

function verdicts(out: Output, vs: Verdict[]) {
  out.table(
    ["GATE", "STATE", "WHY"],
    vs.map((v) => [v.gate, v.open ? "open" : out.c.red("closed"), v.reason]),
    "(no gates)",
  );
}

function showGates(out: Output, g: Awaited<ReturnType<ReturnType<typeof safetyApi>["gates"]>>) {
  out.fields([
    ["fleet", g.fleet],
    ["default gates", g.default && Object.keys(g.default).length ? JSON.stringify(g.default) : "none"],
    ["hold", g.hold ? `${g.hold.reason} (by ${g.hold.by}${g.hold.until ? `, until ${g.hold.until}` : ""})` : "none"],
    [
      "failed / stale",
      g.inputs.health
        ? `${g.inputs.health.failed} / ${g.inputs.health.stale} of ${g.inputs.health.total} (read ${g.inputs.health.age_s}s ago)`
        : "-",
    ],
    [
      "rollouts running",
      g.inputs.rollouts ? `${g.inputs.rollouts.running} (read ${g.inputs.rollouts.age_s}s ago)` : "-",
    ],
    ["rebooted, not yet healthy", String(g.inputs.rebooted_unhealthy)],
  ]);
  for (const group of g.groups) {
    out.line();
    out.line(
      `${group.name}: ${group.open ? "open" : out.c.red("held")} (${group.source === "group" ? "its own gates" : group.source === "fleet" ? "the fleet's gates" : "no gates"})`,
    );
    if (group.gates.length) verdicts(out, group.gates);
  }
}
