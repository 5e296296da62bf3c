import { InvalidArgumentError, type Command } from "commander";
import type { Fleet, FleetHealth, FleetPatch } from "../api.ts";
import { duration, humanSpan } from "../format.ts";
import { Exit, type Io } from "../io.ts";
import { act } from "../context.ts";

const int = (v: string) => {
  if (!/^\d+$/.test(v)) throw new InvalidArgumentError("expected a whole number");
  return Number(v);
};
const seconds = duration({ whole: true, min: 1 });
const collect = (v: string, prev: string[] = []) => [...prev, v];

type Amount = number | `${number}%`;
/** A budget amount: a whole number of servers or a share ("25%"); the API checks the range. */
function amountOf(v: string): Amount {
  if (/^\d+%$/.test(v)) return v as `${number}%`;
  if (/^\d+$/.test(v)) return Number(v);
  throw new InvalidArgumentError("expected a number of servers or a share like 25%");
}

/** The budget --max-unavailable and --max-unavailable-per say, or undefined when neither is given. */
function budgetOf(max: Amount | undefined, per: string[] | undefined) {
  if (max === undefined && !per) return undefined;
  const per_label: Record<string, Amount> = {};
  for (const kv of per ?? []) {
    const at = kv.lastIndexOf("=");
    if (at <= 0) throw new Exit(2, `--max-unavailable-per ${kv}: expected key=n or key=p%`);
    try {
      per_label[kv.slice(0, at)] = amountOf(kv.slice(at + 1));
    } catch (err) {
      throw new Exit(2, `--max-unavailable-per ${kv}: ${(err as Error).message}`);
    }
  }
  return { max_unavailable: max ?? null, per_label };
}

const budgetText = (b: Fleet["disruption_budget"]) =>
  b
    ? [
        b.max_unavailable === null ? null : `at most ${b.max_unavailable} of the fleet`,
        ...Object.entries(b.per_label).map(([k, v]) => `at most ${v} per ${k}`),
      ]
        .filter(Boolean)
        .join(", ")
    : "none";

/** `firewall=true`, `firewall` (true), `firewall=false`; with `null` allowed, `firewall=null` removes it. */
function capabilitiesOf(specs: string[], allowNull: boolean): Record<string, boolean | null> {
  return Object.fromEntries(
    specs.map((kv) => {
      const [k, v = "true"] = kv.split("=");
      if (v === "null" && allowNull) return [k, null];
      if (v !== "true" && v !== "false")
        throw new Exit(2, `--capability ${kv}: the value is true or false${allowNull ? " (null removes it)" : ""}`);
      return [k, v === "true"];
    }),
  );
}

export function registerFleets(program: Command, io: Io) {
  const fleets = program.command("fleets").description("fleets (list by default)");
  const list = act(io, async (ctx) => {
    // The fleets' settings with their servers counted on the server side (GET /v1/status/fleets):
    // one request per page of fleets, every fleet of it counted, never a page of servers.
    const items = await ctx.api.fleetsHealth();
    if (ctx.machine) return ctx.out.data(items);
    const out = ctx.out;
    const n = (counts: Record<string, number | undefined>, k: string) => counts[k] ?? 0;
    const health = (f: FleetHealth) =>
      f.health === "empty"
        ? out.c.dim("empty")
        : f.health === "needs_look"
          ? out.c.yellow(`needs a look${f.stuck_reboots > 0 ? " (stuck reboot)" : ""}`)
          : out.c.green("ok");
    out.table(
      [
        "FLEET",
        "SERVERS",
        "HEALTH",
        "REALIZED",
        "FAILED",
        "STALE",
        "DRIFTED",
        "ROLLOUTS",
        "STALE AFTER",
        { head: "LOCK TTL", wide: true },
        { head: "CAPABILITIES", wide: true },
        { head: "CREATED", wide: true },
      ],
      items.map((f) => [
        f.id,
        f.servers.total,
        health(f),
        n(f.servers.by_status, "realized"),
        n(f.servers.by_status, "failed"),
        n(f.servers.by_status, "stale"),
        n(f.servers.by_status, "drifted"),
        f.rollouts_running,
        humanSpan(f.stale_after_s),
        humanSpan(f.lock_ttl_s),
        capabilities(f),
        out.time(f.created_at),
      ]),
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
        if (ctx.machine) return ctx.out.data(f);
        ctx.out.fields([
          ["fleet", f.id],
          ["capabilities", capabilities(f)],
          ["stale after", humanSpan(f.stale_after_s)],
          ["lock ttl", humanSpan(f.lock_ttl_s)],
          ["unknown FleetLock ids", f.allow_unknown_ids ? "allowed" : "refused"],
          ["default group slots", f.default_group_slots],
          ["disruption budget", budgetText(f.disruption_budget)],
          ["created", ctx.out.time(f.created_at)],
        ]);
      }),
    );
  fleets
    .command("create <fleet>")
    .description("create a fleet")
    .option("--capability <name=bool...>", "capabilities, e.g. firewall=true")
    .option("--stale-after <duration>", "without a report for this long a server is stale (300, 5m)", seconds)
    .option("--lock-ttl <duration>", "a reboot slot held longer is flagged stuck (1h)", seconds)
    .option("--default-group-slots <n>", "slots of reboot groups nobody configured", int)
    .option("--allow-unknown-ids", "accept FleetLock ids no server registered")
    .option("--max-unavailable <n|p%>", "disruption budget: servers of the fleet disrupted at once", amountOf)
    .option("--max-unavailable-per <key=n|p%>", "disruption budget per label key, e.g. zone=1 (repeatable)", collect)
    .option(
      "--image-policy <policy>",
      "catalog: name only catalog images (hm images); any: free-form image strings (default)",
    )
    .action(
      act(io, async (ctx, id: string, o) => {
        const f = await ctx.api.createFleet({
          ...(o.imagePolicy ? { image_policy: policyOf(o.imagePolicy) } : {}),
          id,
          capabilities: capabilitiesOf(o.capability ?? [], false) as Record<string, boolean>,
          stale_after_s: o.staleAfter,
          lock_ttl_s: o.lockTtl,
          default_group_slots: o.defaultGroupSlots,
          allow_unknown_ids: o.allowUnknownIds,
          disruption_budget: budgetOf(o.maxUnavailable, o.maxUnavailablePer),
        });
        if (ctx.machine) return ctx.out.data(f);
        ctx.out.line(`Created fleet ${f.id}.`);
      }),
    );
  fleets
    .command("patch <fleet>")
    .description(
      "change a fleet's capabilities (merged; name=null removes one) and settings; a change re-plans its servers",
    )
    .option("--capability <name=bool|null>", "firewall=true, firewall=false, firewall=null (repeatable)", collect)
    .option("--stale-after <duration>", "without a report for this long a server is stale", seconds)
    .option("--lock-ttl <duration>", "a reboot slot held longer is flagged stuck", seconds)
    .option("--default-group-slots <n>", "slots of reboot groups nobody configured", int)
    .option("--allow-unknown-ids", "accept FleetLock ids no server registered")
    .option("--no-allow-unknown-ids", "refuse FleetLock ids no server registered")
    .option("--max-unavailable <n|p%>", "disruption budget: servers of the fleet disrupted at once", amountOf)
    .option("--max-unavailable-per <key=n|p%>", "disruption budget per label key, e.g. zone=1 (repeatable)", collect)
    .option("--no-disruption-budget", "remove the fleet's disruption budget")
    .option("--image-policy <policy>", "catalog: name only catalog images (hm images); any: free-form image strings")
    .action(
      act(io, async (ctx, id: string, o) => {
        const patch: FleetPatch = {};
        if (o.capability) patch.capabilities = capabilitiesOf(o.capability, true);
        if (o.staleAfter !== undefined) patch.stale_after_s = o.staleAfter;
        if (o.lockTtl !== undefined) patch.lock_ttl_s = o.lockTtl;
        if (o.defaultGroupSlots !== undefined) patch.default_group_slots = o.defaultGroupSlots;
        if (o.allowUnknownIds !== undefined) patch.allow_unknown_ids = o.allowUnknownIds;
        if (o.imagePolicy !== undefined) patch.image_policy = policyOf(o.imagePolicy);
        if (o.disruptionBudget === false) patch.disruption_budget = null;
        else if (o.maxUnavailable !== undefined || o.maxUnavailablePer)
          patch.disruption_budget = budgetOf(o.maxUnavailable, o.maxUnavailablePer);
        if (Object.keys(patch).length === 0) {
          throw new Exit(
            2,
            "nothing to change: pass --capability, --stale-after, --lock-ttl, --default-group-slots, --[no-]allow-unknown-ids, --max-unavailable[-per], --no-disruption-budget or --image-policy",
          );
        }
        const f = await ctx.api.patchFleet(id, patch);
        if (ctx.machine) return ctx.out.data(f);
        ctx.out.line(
          `Fleet ${f.id}: capabilities ${capabilities(f)}, stale after ${humanSpan(f.stale_after_s)}, lock ttl ${humanSpan(f.lock_ttl_s)}.`,
        );
      }),
    );
  fleets
    .command("delete <fleet>")
    .description(
      "delete a fleet whose servers are all removed (admin): its channels, roles and reboot groups go with it",
    )
    .action(
      act(io, async (ctx, id: string) => {
        await ctx.confirm(`Delete fleet ${id}, its channels, roles, reboot groups and FleetLock key?`);
        await ctx.api.deleteFleet(id);
        // The API answers 204: scripts get what was deleted.
        if (ctx.machine) return ctx.out.data({ id, deleted: true });
        ctx.out.line(`Deleted fleet ${id}.`);
      }),
    );
  fleets
    .command("refresh <fleet>")
    .description("ask every server of the fleet to report now")
    .action(
      act(io, async (ctx, id: string) => {
        let requested = 0;
        const failed: string[] = [];
        let cursor: string | undefined;
        do {
          const page = await ctx.api.refreshFleet(id, cursor);
          requested += page.requested;
          failed.push(...page.failed);
          cursor = page.next_cursor ?? undefined;
        } while (cursor);
        if (ctx.machine) return ctx.out.data({ requested, failed });
        ctx.out.line(
          `Asked ${requested} server(s) of ${id} to report${failed.length ? `; ${failed.length} could not be asked: ${failed.join(", ")}` : ""}.`,
        );
        if (failed.length) throw new Exit(1, `${failed.length} refresh(es) failed`);
      }),
    );
}

const capabilities = (f: Fleet) =>
  Object.entries(f.capabilities)
    .map(([k, v]) => (v ? k : `!${k}`))
    .join(", ") || "-";

function policyOf(v: string): "catalog" | "any" {
  if (v !== "catalog" && v !== "any") throw new Exit(2, `--image-policy ${v}: expected catalog or any`);
  return v;
}
