import { InvalidArgumentError, type Command } from "commander";
import type { Fleet } from "../api.ts";
import type { Io } from "../io.ts";
import { act } from "../context.ts";

const int = (v: string) => {
  if (!/^\d+$/.test(v)) throw new InvalidArgumentError("expected a whole number");
  return Number(v);
};

export function registerFleets(program: Command, io: Io) {
  const fleets = program.command("fleets").description("fleets (list by default)");
  const list = act(io, async (ctx) => {
    const items = await ctx.api.listFleets();
    if (ctx.globals.json) return ctx.out.data(items);
    ctx.out.table(
      ["FLEET", "STALE AFTER", "LOCK TTL", "CAPABILITIES", "CREATED"],
      items.map((f: Fleet) => [f.id, `${f.stale_after_s}s`, `${f.lock_ttl_s}s`, capabilities(f), f.created_at]),
      "(no fleets)",
    );
  });
  fleets.command("list", { isDefault: true }).description("list fleets").action(list);
  fleets
    .command("show <fleet>")
    .description("one fleet")
    .action(
      act(io, async (ctx, id: string) => {
        const f = await ctx.api.getFleet(id);
        if (ctx.globals.json) return ctx.out.data(f);
        ctx.out.fields([
          ["fleet", f.id],
          ["capabilities", capabilities(f)],
          ["stale after", `${f.stale_after_s}s`],
          ["lock ttl", `${f.lock_ttl_s}s`],
          ["unknown FleetLock ids", f.allow_unknown_ids ? "allowed" : "refused"],
          ["default group slots", f.default_group_slots],
          ["created", f.created_at],
        ]);
      }),
    );
  fleets
    .command("create <fleet>")
    .description("create a fleet")
    .option("--capability <name=bool...>", "capabilities, e.g. firewall=true")
    .option("--stale-after <s>", "seconds without a report before a server is stale", int)
    .option("--lock-ttl <s>", "seconds after which a reboot slot holder is flagged stuck", int)
    .option("--default-group-slots <n>", "slots of reboot groups nobody configured", int)
    .option("--allow-unknown-ids", "accept FleetLock ids no server registered")
    .action(
      act(io, async (ctx, id: string, o) => {
        const caps = Object.fromEntries(
          (o.capability ?? []).map((kv: string) => {
            const [k, v = "true"] = kv.split("=");
            return [k, v !== "false"];
          }),
        );
        const f = await ctx.api.createFleet({
          id,
          capabilities: caps,
          stale_after_s: o.staleAfter,
          lock_ttl_s: o.lockTtl,
          default_group_slots: o.defaultGroupSlots,
          allow_unknown_ids: o.allowUnknownIds,
        });
        if (ctx.globals.json) return ctx.out.data(f);
        ctx.out.line(`Created fleet ${f.id}.`);
      }),
    );
}

const capabilities = (f: Fleet) =>
  Object.entries(f.capabilities)
    .map(([k, v]) => (v ? k : `!${k}`))
    .join(", ") || "-";
