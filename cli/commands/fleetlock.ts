import type { Command } from "commander";
import type { Io } from "../io.ts";
import { act, fleetOption } from "../context.ts";
import { blockedText } from "../format.ts";

export function registerFleetlock(program: Command, io: Io) {
  registerFleetlockWaiting(program, io);
  program
    .command("fleetlock-key")
    .description("the fleet's FleetLock key")
    .command("rotate")
    .description(
      "create or rotate the key; prints the Zincati config with the new base_url (the old key stops at once)",
    )
    .addOption(fleetOption("the fleet"))
    .action(
      act(io, async (ctx, o: { fleet: string }) => {
        await ctx.confirm(
          `Rotate the FleetLock key of ${o.fleet}? Hosts configured with the current key are refused until they get the new base_url.`,
        );
        const k = await ctx.api.rotateFleetlockKey(o.fleet);
        if (ctx.machine) return ctx.out.data(k);
        ctx.out.note(ctx.out.c.yellow("The key is shown only now. Put this on every host of the fleet:"));
        ctx.out.line(zincatiSnippet(k.base_url));
      }),
    );
}

/** `hm fleetlock waiting`: every host parked in a reboot group's queue, and why it waits. */
function registerFleetlockWaiting(program: Command, io: Io) {
  program
    .command("fleetlock-waiting")
    .description("hosts waiting in the fleet's reboot queues, and why each waits (slots, budget, window, gate, hold)")
    .addOption(fleetOption("the fleet"))
    .action(
      act(io, async (ctx, o: { fleet: string }) => {
        const groups = (await ctx.api.listGroups(o.fleet)).items;
        const items = groups.flatMap((g) =>
          g.queue.map((q) => ({ group: g.name, ...q, blocked_by: [...q.blocked_by] })),
        );
        if (ctx.machine) return ctx.out.data(items);
        ctx.out.table(
          ["GROUP", "POSITION", "HOSTNAME", "WAITED", "WAITS FOR", { head: "ID", wide: true }],
          items.map((q) => [
            q.group,
            q.position,
            q.server?.hostname ?? q.id,
            `${q.waited_s}s`,
            blockedText(q.blocked_by),
            q.id,
          ]),
          "(no host waits)",
        );
      }),
    );
}

function zincatiSnippet(baseUrl: string) {
  return [
    "# /etc/zincati/config.d/55-updates-strategy.toml",
    "[updates]",
    'strategy = "fleet_lock"',
    "",
    "[updates.fleet_lock]",
    `base_url = "${baseUrl}"`,
  ].join("\n");
}
