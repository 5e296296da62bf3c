import { Option, type Command } from "commander";
import { act, fleetOption } from "../context.ts";
import type { Io } from "../io.ts";
import { WEBHOOK_FORMATS, type WebhookFormat } from "../../src/domain/enums.ts";
import { safety } from "./gates.ts";
import type { Ctx } from "../context.ts";
import { pick } from "../resolve.ts";
import { setTimeout as sleep } from "node:timers/promises";

/** How long `hm webhooks test` waits for the first attempt: its 10 s time-out and a margin. */
const TEST_OUTCOME_WAIT_MS = 12_000;
/** The first look comes soon (a receiver usually answers in well under a second), then less often. */
const TEST_POLL_MS = [250, 500, 1000, 2000];

/** A webhook by id, name (from its fleet spec) or short id, through the fleet's list. */
async function webhookOf(ctx: Ctx, fleet: string, ref: string) {
  const { items } = await safety(ctx).webhooks(fleet);
  return pick(items, ref, `webhook of ${fleet}`, (w) => w.name);
}

const collect = (v: string, prev: string[] = []) => [...prev, ...v.split(",").filter(Boolean)];

export function registerWebhooks(program: Command, io: Io) {
  const hooks = program.command("webhooks").description("a fleet's webhooks: events sent to an HTTPS URL, signed");
  const fleetOpt = (c: Command) => c.addOption(fleetOption("the fleet"));

  fleetOpt(hooks.command("list", { isDefault: true }).description("the fleet's webhooks")).action(
    act(io, async (ctx, o: { fleet: string }) => {
      const res = await safety(ctx).webhooks(o.fleet);
      if (ctx.machine) return ctx.out.data(res.items);
      ctx.out.table(
        ["ID", "NAME", "URL", "FORMAT", "EVENTS"],
        res.items.map((w) => [w.id, w.name, w.url, w.format, w.events.join(", ")]),
        "(no webhooks)",
      );
    }),
  );

  fleetOpt(
    hooks
      .command("add")
      .description("add a webhook; its signing secret is printed once")
      // Not --url: that is hm's own API address.
      .requiredOption("--to <url>", "where to send (https://)")
      .requiredOption(
        "--event <name...>",
        "events to send, e.g. reboot.unhealthy_after_reboot,reboot.gate_closed",
        collect,
      )
      .addOption(
        new Option("--format <format>", "the body: CloudEvents JSON or a Slack message")
          .choices(WEBHOOK_FORMATS)
          .default("cloudevents"),
      )
      .option("--description <text>", "what it is for"),
  ).action(
    act(
      io,
      async (ctx, o: { fleet: string; to: string; event: string[]; format: WebhookFormat; description?: string }) => {
        const res = await safety(ctx).createWebhook(o.fleet, {
          url: o.to,
          events: o.event as never,
          format: o.format,
          ...(o.description ? { description: o.description } : {}),
        });
        if (ctx.machine) return ctx.out.data(res);
        ctx.out.line(
          `Webhook ${res.webhook.id} added: ${res.webhook.events.join(", ")} → ${res.webhook.url} (${res.webhook.format}).`,
        );
        ctx.out.line(`Signing secret (shown once): ${res.secret}`);
      },
    ),
  );

  fleetOpt(hooks.command("rm <webhook>").description("remove a webhook (by id, name or short id)")).action(
    act(io, async (ctx, ref: string, o: { fleet: string }) => {
      // Found first: a mistyped id is refused before the question, not after a "y".
      const w = await webhookOf(ctx, o.fleet, ref);
      await ctx.confirm(
        `Remove webhook ${w.id}${w.name ? ` (${w.name})` : ""} of ${o.fleet}, sending to ${w.url}? Deliveries still being retried are given up.`,
      );
      const res = await safety(ctx).deleteWebhook(o.fleet, w.id);
      if (ctx.machine) return ctx.out.data(res);
      ctx.out.line(`Removed webhook ${res.id} (${res.url}).`);
    }),
  );

  fleetOpt(
    hooks
      .command("deliveries <webhook>")
      .description("a webhook's deliveries, newest first (by id, name or short id)")
      .option("--limit <n>", "how many", "50"),
  ).action(
    act(io, async (ctx, ref: string, o: { fleet: string; limit: string }) => {
      const { id } = await webhookOf(ctx, o.fleet, ref);
      const res = await safety(ctx).deliveries(o.fleet, id, Number(o.limit));
      if (ctx.machine) return ctx.out.data(res.items);
      ctx.out.table(
        ["DELIVERY", "EVENT", "STATUS", "ATTEMPTS", "CREATED", "LAST ANSWER"],
        res.items.map((d) => [
          d.id,
          d.event,
          d.status === "delivered" ? d.status : ctx.out.c.yellow(d.status),
          d.attempts,
          d.created_at,
          d.last_error ?? d.last_status,
        ]),
        "(no deliveries)",
      );
    }),
  );

  fleetOpt(
    hooks.command("test <webhook>").description("send a webhook.test event now (by id, name or short id)"),
  ).action(
    act(io, async (ctx, ref: string, o: { fleet: string }) => {
      const { id } = await webhookOf(ctx, o.fleet, ref);
      const api = safety(ctx);
      // The server queues the test and answers at once; hm waits here, not the server, for the
      // first attempt's outcome (an attempt takes 10 s at most), reading the delivery.
      let d = await api.testWebhook(o.fleet, id);
      const until = Date.now() + TEST_OUTCOME_WAIT_MS;
      for (let i = 0; d.status === "pending" && d.attempts === 0 && Date.now() < until; i++) {
        await sleep(TEST_POLL_MS[Math.min(i, TEST_POLL_MS.length - 1)]);
        d = await api.delivery(o.fleet, id, d.id);
      }
      if (ctx.machine) return ctx.out.data(d);
      ctx.out.line(
        d.status === "delivered"
          ? `Delivered (HTTP ${d.last_status}).`
          : d.status !== "pending"
            ? `Not delivered: ${d.status} (${d.last_error ?? "no answer"}): hm webhooks deliveries ${id} --fleet ${o.fleet}`
            : d.attempts === 0
              ? `Queued, not attempted yet: hm webhooks deliveries ${id} --fleet ${o.fleet}`
              : `Not taken yet (${d.last_error ?? "pending"}); retried with backoff: hm webhooks deliveries ${id} --fleet ${o.fleet}`,
      );
    }),
  );
}
