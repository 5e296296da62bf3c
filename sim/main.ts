#!/usr/bin/env node
/**
 * `npm run sim -- --url … --token … --fleet … --servers N --duration S [faults]`: a fleet of
 * simulated hosts, each running the reference agent, in this one process. Stops by itself.
 */
import { Command, InvalidArgumentError, Option } from "commander";
import { SingleBar } from "cli-progress";
import Table from "cli-table3";
import { createColors } from "picocolors";
import { resolve } from "node:path";
import { resolveConnection, UsageError } from "../cli/config.ts";
import { DEFAULTS, runSim, type SimOptions } from "./simulator.ts";

// Colour only where a person reads: each stream by its own terminal (never in a pipe or a file,
// whatever CI or the other stream is), and never with NO_COLOR.
const colorsFor = (stream: NodeJS.WriteStream) => createColors(!!stream.isTTY && !process.env.NO_COLOR);
const outColors = colorsFor(process.stdout);
const errColors = colorsFor(process.stderr);

const num =
  (min: number, max = Infinity) =>
  (v: string) => {
    const n = Number(v);
    if (!Number.isFinite(n) || n < min || n > max)
      throw new InvalidArgumentError(`expected a number from ${min} to ${max}`);
    return n;
  };
const rate = num(0, 1);

const program = new Command("sim")
  .description("Simulate a fleet of hosts running the reference agent against Harbormaster")
  .option(
    "--url <url>",
    "Harbormaster base URL (HM_URL, else hm's context, else where npm start serves: .wrangler/hm-local.json)",
  )
  .option(
    "--token <token>",
    "operator token with write scope, admin for reboots (HM_TOKEN, else hm's context, else npm start's admin token)",
  )
  .requiredOption("--fleet <id>", "fleet to use (created if missing)")
  .option("--servers <n>", "number of hosts", num(1, 100_000), DEFAULTS.servers)
  .option("--duration <s>", "stop after this many seconds", num(1, 24 * 3600), DEFAULTS.durationS)
  .option("--agents <n>", "agents in each desired config", num(1, 50), DEFAULTS.agents)
  .option("--install-fail-rate <r>", "fraction of hosts where one install always fails", rate, DEFAULTS.installFailRate)
  .option("--remove-fail-rate <r>", "fraction of hosts where removals always fail", rate, DEFAULTS.removeFailRate)
  .option("--slow-rate <r>", "fraction of slow hosts", rate, DEFAULTS.slowRate)
  .option("--latency <ms>", "median driver operation time on normal hosts (log-normal)", num(0), DEFAULTS.latencyMs)
  .option("--slow-latency <ms>", "median driver operation time on slow hosts", num(0), DEFAULTS.slowLatencyMs)
  .option("--silent-rate <r>", "fraction of hosts that stop reporting mid-run", rate, DEFAULTS.silentRate)
  .option("--reboot-rate <r>", "fraction of hosts that take a reboot slot and reboot", rate, DEFAULTS.rebootRate)
  .option("--lost-steady-rate <r>", "fraction of reboots whose steady-state is lost", rate, DEFAULTS.lostSteadyRate)
  .option("--slots <n>", "slots of the reboot group", num(0, 10_000), DEFAULTS.slots)
  .option("--group <name>", "reboot group of the simulated hosts", DEFAULTS.group)
  .option("--change-at <s>", "issue a second generation (one agent removed, one updated) at this second", num(0))
  .option("--ramp <s>", "hosts start spread over this many seconds", num(0), DEFAULTS.rampS)
  .addOption(
    new Option("--transport <t>", "how hosts learn of changes: the host channel, or the HTTP long poll only")
      .choices(["channel", "http"])
      .default(DEFAULTS.transport),
  )
  .option("--wait <s>", "host long-poll wait (HTTP)", num(0, 60), DEFAULTS.waitS)
  .option("--heartbeat <s>", "host report interval", num(1), DEFAULTS.heartbeatS)
  .option("--seed <n>", "seed for fault injection", num(0), DEFAULTS.seed)
  .option("--state <file>", "where server tokens are kept for reuse (default .sim/<fleet>.json)")
  .option("--concurrency <n>", "requests in flight during setup", num(1, 256), DEFAULTS.setupConcurrency)
  .addOption(new Option("--json", "print the summary as JSON (hosts included)"))
  .option("--quiet", "no live progress");

async function main() {
  program.parse();
  const f = program.opts();
  let conn;
  try {
    conn = resolveConnection({ url: f.url, token: f.token });
  } catch (err) {
    if (err instanceof UsageError) program.error(err.message, { exitCode: 2 });
    throw err;
  }
  const stop = new AbortController();
  process.once("SIGINT", () => stop.abort());
  const live = !f.quiet && !f.json;
  const bar =
    live && process.stderr.isTTY
      ? new SingleBar({
          format: "{bar} {elapsed}/{total}s | {statuses} | ops {ops} | errors {errors} | reboots {reboots}",
          hideCursor: true,
          stream: process.stderr,
        })
      : null;
  let started = false;
  const options: SimOptions = {
    ...DEFAULTS,
    url: conn.url,
    token: conn.token,
    fleet: f.fleet,
    servers: f.servers,
    durationS: f.duration,
    agents: f.agents,
    installFailRate: f.installFailRate,
    removeFailRate: f.removeFailRate,
    slowRate: f.slowRate,
    latencyMs: f.latency,
    slowLatencyMs: f.slowLatency,
    silentRate: f.silentRate,
    rebootRate: f.rebootRate,
    lostSteadyRate: f.lostSteadyRate,
    slots: f.slots,
    group: f.group,
    changeAtS: f.changeAt ?? null,
    rampS: f.ramp,
    transport: f.transport,
    waitS: f.wait,
    heartbeatS: f.heartbeat,
    seed: f.seed,
    stateFile: resolve(f.state ?? `.sim/${f.fleet}.json`),
    setupConcurrency: f.concurrency,
    signal: stop.signal,
    progressEveryMs: bar ? 500 : 5000,
    onProgress: (p) => {
      if (!live) return;
      const statuses = Object.entries(p.byStatus)
        .map(([k, v]) => `${k} ${v}`)
        .join(", ");
      if (bar) {
        if (!started) bar.start(Math.round(p.durationS), 0, { elapsed: 0, statuses, ops: 0, errors: 0, reboots: 0 });
        started = true;
        bar.update(Math.min(Math.round(p.elapsedS), Math.round(p.durationS)), {
          elapsed: Math.round(p.elapsedS),
          statuses,
          ops: p.ops,
          errors: p.errors,
          reboots: p.reboots,
        });
      } else {
        console.error(
          `${Math.round(p.elapsedS)}/${p.durationS}s  ${statuses}  ops ${p.ops}  errors ${p.errors}  reboots ${p.reboots}`,
        );
      }
    },
  };
  if (live)
    console.error(
      errColors.dim(
        `simulating ${options.servers} hosts in fleet '${options.fleet}' against ${options.url} for ${options.durationS}s`,
      ),
    );
  const summary = await runSim(options);
  bar?.stop();
  if (f.json) {
    console.log(JSON.stringify(summary, null, 2));
    return;
  }
  // cli-table3 colours its borders and headers by its own guess (CI counts as a terminal there).
  const t = new Table(process.stdout.isTTY && !process.env.NO_COLOR ? {} : { style: { head: [], border: [] } });
  const row = (k: string, v: unknown) => t.push([k, typeof v === "string" ? v : JSON.stringify(v)]);
  row("servers", `${summary.servers} (${summary.registered} registered, ${summary.reused} reused)`);
  row("duration", `${summary.durationS.toFixed(1)} s`);
  row(
    "status (last report)",
    Object.entries(summary.byStatus)
      .map(([k, v]) => `${k} ${v}`)
      .join(", "),
  );
  row(
    "transport",
    options.transport === "channel"
      ? `host channel (sockets opened ${summary.channel.opened}, closed or refused ${summary.channel.closed})`
      : "HTTP long poll",
  );
  row(
    "host operations",
    `${summary.ops.total} (polls ${summary.ops.polls}, of which changed ${summary.ops.polls_changed}; pushes ${summary.ops.pushes}; reports ${summary.ops.reports}, heartbeats on a poll ${summary.ops.heartbeats}; FleetLock ${summary.ops.fleetlock}); errors ${summary.ops.errors}`,
  );
  row("report latency", `p50 ${summary.latency_ms.report_p50} ms, p99 ${summary.latency_ms.report_p99} ms`);
  row(
    "push (desired written → host has it)",
    summary.latency_ms.push_p50 === null
      ? "-"
      : `p50 ${summary.latency_ms.push_p50} ms, p99 ${summary.latency_ms.push_p99} ms`,
  );
  row(
    "convergence (desired → realized)",
    summary.latency_ms.converge_p50 === null
      ? "-"
      : `p50 ${summary.latency_ms.converge_p50} ms, p99 ${summary.latency_ms.converge_p99} ms`,
  );
  row("reboots", summary.reboots);
  row("reboot group", summary.group);
  row(
    "simulator overhead",
    `${summary.overhead.cpu_us_per_op} µs CPU per host operation (${summary.overhead.cpu_ms} ms in all); event loop ${Math.round(summary.overhead.event_loop_utilization * 100)}% busy`,
  );
  console.log(t.toString());
  if (summary.group.over_slots > 0)
    console.log(outColors.red(`reboot group exceeded its slots in ${summary.group.over_slots} samples`));
}

main().catch((err) => {
  console.error(errColors.red(`sim: ${err instanceof Error ? err.message : String(err)}`));
  process.exit(1);
});
