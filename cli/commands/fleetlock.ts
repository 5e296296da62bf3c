import type { Command } from "commander";
import type { Io } from "../io.ts";
import { act, fleetOption } from "../context.ts";

export function registerFleetlock(program: Command, io: Io) {
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
