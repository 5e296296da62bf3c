/**
 * hm rollout start | status | watch | pause | resume | cancel | rollback, and hm rollouts (docs/rollouts.md).
 * `watch` (and `start --watch`) follow the rollout on its long poll with a progress bar on a
 * terminal (a line per change otherwise) and end with an exit code scripts can branch on:
 * 0 succeeded or rolled back, 1 failed or cancelled, 3 the timeout came first.
 */
import { SingleBar } from "cli-progress";
import { InvalidArgumentError, Option, type Command } from "commander";
import { ROLLOUT_CONTROLS, ROLLOUT_STATES, ROLLOUT_TARGET_STATES as TARGET_STATES } from "../../src/domain/enums.ts";
import { duration, humanSpan, blockedText } from "../format.ts";
import type { Rollout, RolloutInput } from "../api.ts";
import { Exit, type Io, type Output } from "../io.ts";
import { act, fleetOption, type Ctx } from "../context.ts";
import { defaultFleet } from "../config.ts";
import { isUuid, pick } from "../resolve.ts";
import { labelsOf } from "./servers.ts";
import { windowArg } from "./reboot-groups.ts";
import { readFileSync } from "node:fs";

const wholeNumber = (v: string) => {
  if (!/^\d+$/.test(v)) throw new InvalidArgumentError("expected a whole number");
  return Number(v);
};
const positive = (v: string) => {
  const n = Number(v);
  if (!Number.isFinite(n) || n <= 0) throw new InvalidArgumentError("expected a positive number");
  return n;
};
const collect = (v: string, prev: string[] = []) => [...prev, v];

/** A size as `--canary 2` or `--wave 10%`. */
const size = (v: string): { count: number } | { percent: number } => {
  const m = /^(\d+(?:\.\d+)?)(%?)$/.exec(v.trim());
  if (!m || Number(m[1]) <= 0) throw new InvalidArgumentError("expected a count (2) or a share (10%)");
  return m[2] ? { percent: Number(m[1]) } : { count: Number(m[1]) };
};
const collectSize = (v: string, prev: ReturnType<typeof size>[] = []) => [...prev, size(v)];

/** `--query 'expr < 0.05'`: a Prometheus expression, a comparison and a threshold. */
const queryCheck = (v: string) => {
  const m = /^(.+?)\s*(<=|>=|==|!=|<|>)\s*(-?\d+(?:\.\d+)?(?:e-?\d+)?)$/.exec(v.trim());
  if (!m)
    throw new InvalidArgumentError(
      "expected '<expression> <comparison> <threshold>', e.g. 'job:errors:ratio5m < 0.05'",
    );
  return { query: m[1], comparison: m[2], threshold: Number(m[3]) };
};

type Strategy = NonNullable<RolloutInput["strategy"]>;

/**
 * The strategy of `hm rollout start`: a file (JSON: `{"steps": [...]}`), or built from flags in
 * this order: canary, its analysis, a pause, then the waves (each `--by` the label given); `--window`
 * adds maintenance windows (to one wave of every target when no step is given).
 */
function strategyOf(o: Record<string, any>): Strategy | undefined {
  const strategy = stepsOf(o);
  if (!o.window) return strategy;
  if (strategy?.windows) throw new Exit(2, `--window or the windows of ${o.strategy}, not both`);
  // Windows alone: today's one wave, started only inside them.
  return { ...(strategy ?? { steps: [{ type: "wave", percent: 100 }], auto_rollback: false }), windows: o.window };
}

/** `--no-fleet-strategy`: one wave (strategy: null), the fleet's default for the agent ignored. */
function fleetStrategy(o: Record<string, any>, strategy: Strategy | undefined): Strategy | null | undefined {
  if (o.fleetStrategy !== false) return strategy;
  if (strategy) throw new Exit(2, "--no-fleet-strategy starts one wave: not with a strategy of its own");
  return null;
}

function stepsOf(o: Record<string, any>): Strategy | undefined {
  const flags = o.canary || o.wave || o.ramp || o.analysis !== undefined || o.pause !== undefined || o.autoRollback;
  if (o.strategy) {
    if (flags) throw new Exit(2, "--strategy FILE or the strategy flags (--canary, --wave, …), not both");
    let text: string;
    try {
      text = readFileSync(o.strategy, "utf8");
    } catch (e) {
      throw new Exit(2, `cannot read ${o.strategy}: ${(e as Error).message}`);
    }
    try {
      return JSON.parse(text) as Strategy;
    } catch (e) {
      throw new Exit(2, `${o.strategy} is not JSON: ${(e as Error).message}`);
    }
  }
  if (!flags) return undefined;
  const steps: Strategy["steps"] = [];
  if (o.canary) steps.push({ type: "canary", ...o.canary });
  if (o.analysis !== undefined || o.query) {
    const checks: Record<string, unknown>[] = [{ kind: "realized" }];
    if (o.maxFleetFailures !== undefined) checks.push({ kind: "failure_percent", max_percent: o.maxFleetFailures });
    if (o.query) {
      if (!o.prometheus) throw new Exit(2, "--query needs --prometheus <url>");
      checks.push({ kind: "prometheus", endpoint: o.prometheus, ...o.query });
    }
    steps.push({ type: "analysis", bake_s: o.analysis ?? 60, checks } as Strategy["steps"][number]);
  }
  if (o.pause !== undefined)
    steps.push(o.pause === "manual" ? { type: "pause" } : { type: "pause", duration_s: o.pause });
  for (const w of o.wave ?? []) steps.push({ type: "wave", ...w, ...(o.by ? { by: o.by } : {}) });
  if (o.ramp) steps.push({ type: "wave", ramp: o.ramp, ...(o.by ? { by: o.by } : {}) });
  return { steps, auto_rollback: !!o.autoRollback } as Strategy;
}

/** The plan as `hm rollout show` prints it: one line per step, and why it waits. */
function plan(out: Output, r: Rollout) {
  if (r.steps.length) {
    out.table(
      ["#", "STEP", "STATE", "SERVERS", "DONE", "FAILED"],
      r.steps.map((s) => [
        s.phase === r.current_phase ? `> ${s.phase}` : `  ${s.phase}`,
        s.title,
        s.state,
        s.kind === "release"
          ? s.servers.slice(0, 4).join(", ") + (s.size > 4 ? ` (+${s.size - 4})` : "")
          : s.until
            ? `until ${out.time(s.until)}`
            : null,
        s.kind === "release" ? (s.counts.done ?? 0) : null,
        s.kind === "release" ? (s.counts.failed ?? 0) + (s.counts.timed_out ?? 0) : null,
      ]),
    );
    const last = new Map(r.analysis.map((a) => [a.name, a]));
    for (const a of last.values())
      out.line(
        `analysis: ${a.name}: ${a.ok ? out.c.green("holds") : out.c.red("fails")} (${a.detail}) at ${out.time(a.at)}`,
      );
  }
  for (const b of r.blocked_by) out.line(out.c.yellow(`waiting: ${b.message}`));
}

const ENDED = new Set(["succeeded", "failed", "cancelled", "rolled_back"]);
const quiet = (r: Rollout) => ENDED.has(r.state) && r.counts.applying === 0;

function summary(out: Output, r: Rollout) {
  const c = r.counts;
  out.fields([
    ["rollout", r.id],
    ["fleet / agent", `${r.fleet} / ${r.agent}`],
    ["image", `${r.image} (${r.version})`],
    ["state", `${r.state}${r.pass ? " (rollback pass)" : ""}${r.reason ? ` — ${r.reason}` : ""}`],
    [
      "targets",
      `${r.total}: ${c.done} done, ${c.applying} applying, ${c.queued} queued, ${c.failed} failed, ${c.timed_out} timed out, ${c.skipped} skipped`,
    ],
    [
      "strategy",
      r.strategy_source === "fleet_default"
        ? `the fleet's default for ${r.agent} (channels.${r.agent}.rollout)`
        : r.strategy_source === "request"
          ? "as started"
          : "none (one wave)",
    ],
    ["concurrency", r.concurrency],
    [
      "median / eta",
      `${r.median_s === null ? "-" : humanSpan(r.median_s)} / ${r.eta_s === null ? "-" : humanSpan(r.eta_s)}`,
    ],
    ["server timeout", r.server_timeout_s === null ? "-" : humanSpan(r.server_timeout_s)],
    ["channel moved", r.channel_updated ?? "queued (read the rollout again)"],
    ["reboot slots", r.reboot_slot],
  ]);
  for (const w of r.warnings) out.line(out.c.yellow(`warning: ${w.message}`));
}

/** Follows the rollout until it has ended with nothing in flight, or `timeoutS` passed. */
async function watch(ctx: Ctx, start: Rollout, timeoutS: number): Promise<never | void> {
  const out = ctx.out;
  const deadline = Date.now() + timeoutS * 1000;
  const ended = (r: Rollout) => r.counts.done + r.counts.failed + r.counts.timed_out + r.counts.skipped;
  const bar =
    ctx.io.interactive && !ctx.machine
      ? new SingleBar({ format: " {bar} {value}/{total} | {state} | {detail}", hideCursor: true })
      : null;
  const detail = (r: Rollout) =>
    `${r.counts.applying} applying, ${r.counts.failed + r.counts.timed_out} failed, eta ${r.eta_s ?? "-"} s`;
  let r = start;
  let warned = r.warnings.length;
  bar?.start(r.total, ended(r), { state: r.state, detail: detail(r) });
  const say = (x: Rollout) => {
    if (bar) bar.update(ended(x), { state: x.state, detail: detail(x) });
    else if (!ctx.machine)
      out.note(`${new Date().toISOString()}  ${x.state}  ${ended(x)}/${x.total} ended  ${detail(x)}`);
    for (const w of x.warnings.slice(0, Math.max(0, x.warnings.length - warned))) out.note(`warning: ${w.message}`);
    warned = x.warnings.length;
  };
  try {
    while (!quiet(r)) {
      const left = deadline - Date.now();
      if (left <= 0) {
        if (ctx.machine) out.data(r);
        throw new Exit(3, `timed out after ${timeoutS}s: rollout ${r.id} is ${r.state}`);
      }
      r = await ctx.api.waitRollout(r.id, r.change, Math.max(1, Math.min(60, Math.ceil(left / 1000))));
      say(r);
    }
  } finally {
    bar?.stop();
  }
  if (ctx.machine) out.data(r);
  else summary(out, r);
  if (r.state === "failed" || r.state === "cancelled")
    throw new Exit(1, `rollout ${r.id} ${r.state}${r.reason ? `: ${r.reason}` : ""}`);
}

/**
 * A rollout as operators name it: its id, `latest` (the newest), an agent's name (that agent's
 * newest rollout) or a short id, through the API's list (newest first). `latest` and agent names
 * stay within HM_FLEET or the context's fleet when one is set.
 */
async function rolloutId(ctx: Ctx, ref: string): Promise<string> {
  if (isUuid(ref)) return ref;
  const fleet = defaultFleet({ context: ctx.globals.context }, ctx.io.env)?.fleet;
  if (ref === "latest") {
    const [newest] = await ctx.api.listRollouts(fleet ? { fleet } : {}, 1);
    if (!newest) throw new Exit(1, `no rollouts${fleet ? ` in fleet ${fleet}` : ""} yet`);
    return newest.id;
  }
  const [ofAgent] = await ctx.api.listRollouts(fleet ? { fleet, agent: ref } : { agent: ref }, 1);
  if (ofAgent) return ofAgent.id;
  return pick(await ctx.api.listRollouts({}, 1000), ref, "rollout", (r) => r.agent).id;
}

export function registerRollouts(program: Command, io: Io) {
  program
    .command("rollouts")
    .description("rollouts, newest first")
    .option("--fleet <fleet>")
    .option("--agent <agent>")
    .addOption(new Option("--state <state>").choices(ROLLOUT_STATES))
    .action(
      act(io, async (ctx, o: { fleet?: string; agent?: string; state?: (typeof ROLLOUT_STATES)[number] }) => {
        const items = await ctx.api.listRollouts(o, 200);
        if (ctx.machine) return ctx.out.data(items);
        ctx.out.table(
          ["ROLLOUT", "FLEET", "AGENT", "IMAGE", "STATE", "DONE", "FAILED", "CREATED"],
          items.map((r) => [
            r.id,
            r.fleet,
            r.agent,
            r.image,
            r.state,
            r.counts.done ?? 0,
            (r.counts.failed ?? 0) + (r.counts.timed_out ?? 0),
            ctx.out.time(r.created_at),
          ]),
        );
      }),
    );

  const rollout = program.command("rollout").description("per-agent rollouts");
  rollout
    .command("start")
    .alias("create")
    .description("start updating one agent to one image across a fleet (a canary, analysis and waves with a strategy)")
    .addOption(fleetOption())
    .requiredOption("--agent <agent>")
    .requiredOption("--image <image>")
    .requiredOption("--version <version>", "the image's version")
    .option("--concurrency <n>", "targets applying at once (default 20)", wholeNumber)
    .option(
      "--server-timeout <duration>",
      "a target with no realizing report by then times out (default 1h)",
      duration({ whole: true, min: 1 }),
    )
    .option("--slow-factor <x>", "warn about a server slower than x times the median", positive)
    .option("--max-failures <n>", "abort once failures exceed n", wholeNumber)
    .option("--max-failure-percent <p>", "abort once this share of ended targets failed", positive)
    .option("--min-completed <n>", "judge the percentage only after n targets ended", wholeNumber)
    .option("--role <role>", "only servers with this role (repeatable)", collect)
    .option("--label <key=value>", "only servers with this label (repeatable: all must hold)", collect)
    .option("--server <server>", "only this server: id or hostname (repeatable)", collect)
    .option("--exclude <id-or-hostname>", "leave this server out (repeatable)", collect)
    .option("--no-update-channel", "leave the fleet's channel where it is")
    .option("--reboot-slot", "apply each target only while holding a slot of its reboot group")
    .option("--channel-only", "move only the fleet's channel (servers set up later get the image); write no server")
    .option("--strategy <file>", 'steps from a JSON file: {"steps": [...], "auto_rollback": true} (docs/rollouts.md)')
    .option("--canary <n|p%>", "first release this many targets (or this share)", size)
    .option(
      "--analysis <duration>",
      "after the canary: its servers must stay realized and healthy this long",
      duration({ whole: true, min: 0 }),
    )
    .option(
      "--max-fleet-failures <p>",
      "with --analysis: and the fleet's failed and stale servers at most p %",
      positive,
    )
    .option("--prometheus <url>", "with --query: a Prometheus-compatible endpoint")
    .option("--query <check>", "with --analysis: '<expression> <comparison> <threshold>' must hold", queryCheck)
    .option("--pause <duration|manual>", "then bake this long (or wait to be resumed)", (v: string) =>
      v === "manual" ? v : duration({ whole: true, min: 1 })(v),
    )
    .option("--wave <n|p%>", "then a wave: p% cumulative share, or n more targets (repeatable)", collectSize)
    .option("--ramp <start:factor>", "then waves of start, start×factor, … until every target", (v: string) => {
      const m = /^(\d+):(\d+(?:\.\d+)?)$/.exec(v);
      if (!m) throw new InvalidArgumentError("expected start:factor, e.g. 1:2");
      return { start: Number(m[1]), factor: Number(m[2]) };
    })
    .option("--by <label-key>", "waves one value of this label at a time (e.g. zone)")
    .option("--auto-rollback", "a failed analysis rolls back the servers the rollout changed")
    .option(
      "--no-fleet-strategy",
      "without a strategy of its own, one wave (else the fleet's default for the agent, if its spec sets one)",
    )
    .option(
      "--window <spec...>",
      "targets start only inside these weekly windows, e.g. Sat,Sun@23:30+60/Europe/Berlin (repeatable)",
      windowArg,
    )
    .option("--watch", "follow it to the end (exit code as for watch)")
    .option("--timeout <duration>", "with --watch: give up after this long (1h)", duration({ min: 1 }), 3600)
    .action(
      act(io, async (ctx, o: Record<string, any>) => {
        const abort =
          o.maxFailures !== undefined || o.maxFailurePercent !== undefined
            ? { max_failures: o.maxFailures, max_failure_percent: o.maxFailurePercent, min_completed: o.minCompleted }
            : undefined;
        const input: RolloutInput = {
          fleet: o.fleet,
          agent: o.agent,
          image: o.image,
          version: o.version,
          concurrency: o.concurrency,
          server_timeout_s: o.serverTimeout,
          slow_factor: o.slowFactor,
          abort,
          selector:
            o.role || o.server || o.label ? { roles: o.role, servers: o.server, labels: labelsOf(o.label) } : undefined,
          exclude: o.exclude,
          update_channel: o.updateChannel,
          reboot_slot: !!o.rebootSlot,
          channel_only: !!o.channelOnly,
          strategy: fleetStrategy(o, strategyOf(o)),
        };
        const r = await ctx.api.startRollout(input);
        if (o.watch) return watch(ctx, r, o.timeout);
        if (ctx.machine) return ctx.out.data(r);
        summary(ctx.out, r);
        plan(ctx.out, r);
      }),
    );

  rollout
    .command("status <rollout>")
    .alias("show")
    .description("counts, median, ETA, warnings, the strategy's steps and why it waits")
    .action(
      act(io, async (ctx, ref: string) => {
        const id = await rolloutId(ctx, ref);
        const r = await ctx.api.getRollout(id);
        if (ctx.machine) return ctx.out.data(r);
        summary(ctx.out, r);
        plan(ctx.out, r);
        const failed = [
          ...(await ctx.api.rolloutTargets(id, "failed", 20)),
          ...(await ctx.api.rolloutTargets(id, "timed_out", 20)),
        ];
        if (failed.length)
          ctx.out.table(
            ["HOSTNAME", "STATE", "REASON", { head: "SERVER", wide: true }],
            failed.map((t) => [t.hostname, t.state, t.reason, t.server_id]),
          );
      }),
    );

  rollout
    .command("watch <rollout>")
    .description("follow a rollout to its end: exit 0 succeeded or rolled back, 1 failed or cancelled, 3 timeout")
    .option("--timeout <duration>", "give up after this long (1h)", duration({ min: 1 }), 3600)
    .action(
      act(io, async (ctx, ref: string, o: { timeout: number }) =>
        watch(ctx, await ctx.api.getRollout(await rolloutId(ctx, ref)), o.timeout),
      ),
    );

  rollout
    .command("targets <rollout>")
    .description("the rollout's targets in order, by hostname")
    .addOption(new Option("--state <state>", "only this state").choices(TARGET_STATES))
    .option("--pass <n>", "0: forward, 1: rollback (default: the current pass)", wholeNumber)
    .action(
      act(io, async (ctx, ref: string, o: { state?: (typeof TARGET_STATES)[number]; pass?: number }) => {
        const id = await rolloutId(ctx, ref);
        const items = await ctx.api.rolloutTargets(id, o.state, undefined, o.pass);
        if (ctx.machine) return ctx.out.data(items);
        const out = ctx.out;
        out.table(
          [
            "HOSTNAME",
            "STATE",
            "IMAGE",
            "GENERATION",
            "STARTED",
            "TOOK",
            "REASON",
            "WAITS FOR",
            { head: "SERVER", wide: true },
            { head: "FROM", wide: true },
            { head: "SLOT", wide: true },
          ],
          items.map((t) => [
            t.hostname,
            t.slow ? out.c.yellow(`${t.state} (slow)`) : t.state,
            t.image,
            t.generation,
            out.time(t.started_at),
            t.duration_s === null ? null : humanSpan(t.duration_s),
            t.state === "waiting_budget" ? null : t.reason,
            blockedText(t.blocked_by),
            t.server_id,
            t.from_image,
            t.reboot_slot,
          ]),
          "(no targets)",
        );
      }),
    );

  rollout
    .command("events <rollout>")
    .description("everything that happened to the rollout, oldest first")
    .action(
      act(io, async (ctx, ref: string) => {
        const id = await rolloutId(ctx, ref);
        const items = await ctx.api.rolloutEvents(id);
        if (ctx.machine) return ctx.out.data(items);
        const out = ctx.out;
        out.table(
          ["AT", "EVENT", "SERVER", "DETAILS"],
          items.map((e) => [
            out.time(e.at),
            e.kind,
            e.hostname ?? e.server_id,
            e.details === null ? null : JSON.stringify(e.details),
          ]),
          "(no events)",
        );
      }),
    );

  rollout
    .command("end-target <rollout> <server>")
    .description("stop waiting for one stuck target (id or hostname): applying becomes failed, queued skipped")
    .option("--reason <text>", "why (audited)")
    .action(
      act(io, async (ctx, ref: string, server: string, o: { reason?: string }) => {
        const id = await rolloutId(ctx, ref);
        await ctx.confirm(`End target ${server} of rollout ${id}? An applying target counts as failed.`);
        const r = await ctx.api.endRolloutTarget(id, server, o.reason);
        if (ctx.machine) return ctx.out.data(r);
        ctx.out.line(
          `Target ${r.target.hostname} is ${r.target.state} (${r.target.reason}); rollout ${r.rollout.state}.`,
        );
      }),
    );

  for (const action of ROLLOUT_CONTROLS) {
    rollout
      .command(`${action} <rollout>`)
      .description(
        {
          pause: "start no new target (those applying finish)",
          resume: "continue a paused rollout",
          cancel: "skip every queued target (those applying finish)",
          rollback: "put every done target back to the image it had",
        }[action],
      )
      .action(
        act(io, async (ctx, ref: string) => {
          const id = await rolloutId(ctx, ref);
          if (action === "cancel" || action === "rollback") await ctx.confirm(`${action} rollout ${id}?`);
          const r = await ctx.api.controlRollout(id, action);
          if (ctx.machine) return ctx.out.data(r);
          ctx.out.line(`Rollout ${id} is ${r.state}.`);
        }),
      );
  }
}
