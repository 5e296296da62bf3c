// `npm run bench -- cost [--transport channel,http] [--hosts 150] [--duration 180] [--rounds 4]
// [--sequential]`: what a fleet would pay Cloudflare. For each transport (a fleet of its own, on a
// server of its own, the transports side by side unless --sequential), the simulator (sim/) plays
// HOSTS hosts in real time (no time compression), each running the reference agent loop of that
// transport, and the local meter (src/local/meter.ts, /__local/meter) counts what a deployment is
// billed for, in windows:
//   setup   registration and first desired configs (one-off per host: shown, not in the bill);
//   join    hosts come up over the first RAMP_S seconds (shown, not in the bill);
//   events  one fleet-wide desired change, a few single-server changes, one rollout of an agent
//           to every host, and one reboot wave (REBOOT_RATE of the hosts, through FleetLock), and
//           all that follows from them: the timers they leave (a channel host's left timer), the
//           cron handing their audit rows on and rolling their period's history up;
//   steady  STEADY_S seconds (whole report periods) once the cron has gone quiet: nothing but the
//           agent loop, and one cron tick that is no rollup.
// The bill per host-month is the steady rate over 30 days plus ROUNDS rounds of events (each the
// events window less the steady rate over its length), at the list prices of ../prices.ts, for
// 1,000 / 10,000 / 100,000 hosts beyond the plan's included amounts. The cron runs every 60 s
// (through /__scheduled) as it does deployed, and is billed once per deployment: its steady
// tick's D1 rows and CPU times a month's ticks (../month.ts).
// Worker CPU is an estimate: the local runtime's CPU time over the window (workerd, from /proc),
// less its idle rate (measured before the run), shared between the Worker's requests and the
// objects' in proportion to their counts (objects are billed for duration, not CPU). It runs the
// local D1 and the dev server's plumbing too, and on a shared machine, so it errs high.
// Memory is not billed (an awake object is priced at 128 MB, ../prices.ts): the local runtime's
// resident memory at the steady window's end is shown beside the bill, read from /proc for the
// workerd processes of that transport's own server, found by its port (../proc.ts).
// Each transport's bill is itemized (../bill.ts), then all of them side by side with the bill
// measured before the host channel.
import { tsImport } from "tsx/esm/api";
import type { FetchLike } from "../../../agent/http.ts";
import type { SimOptions, SimSummary } from "../../../sim/simulator.ts";
import type { BenchContext } from "../run.ts";
import {
  compare,
  imageRolloutBill,
  report,
  type Reading,
  type TransportBill,
  type Usage,
  type Window,
} from "../bill.ts";
import { calibrateCpu } from "../cpu.ts";
import { runtimeRssMbAt } from "../proc.ts";
import { LEASE_REFRESH_ROWS } from "../lease-refresh.ts";
import { HISTORY_ROLLUP_ROWS } from "../history-rollup.ts";
import { PERIOD_MS as HISTORY_PERIOD_MS, periodOf } from "../../../src/history/rollup.ts";
import { MONTH_S } from "../prices.ts";
import { INDEX_LEASE_MS } from "../../../src/domain/channel.ts";
import { quietGraceMs } from "../../../src/ledger/quiet.ts";

/**
 * How simulated hosts talk to Harbormaster: the simulator options that give its hosts that agent
 * loop, and what it costs on a period longer than the steady window can see (per host-month).
 */
// A watched host's index row is refreshed once a lease (src/ledger/projection.ts): what that costs
// is measured by the meter and pinned by test/meter.test.ts (../lease-refresh.ts).
/** The simulator's fleets go stale after 4 report periods (sim/): the quiet watch fires this often. */
const QUIET_PERIOD_S = 4 * 60 + quietGraceMs(4 * 60) / 1000;
/**
 * The share of the quiet watch's firings that find the ledger evicted and the host between two
 * polls (src/ledger/quiet.ts, QuietMark): each then looks again once more, which is one more alarm
 * (a DO request, its timer's row and the alarm set again) and the next poll's heartbeat stored.
 * Taken as the share of a minute the reference agent has no poll in flight, at most about 3 s
 * (its reconcile and its 1 s minimum gap between polls), as if its ledger were always evicted:
 * an upper bound; the simulator's hosts poll again within milliseconds.
 */
const QUIET_DOUBT_SHARE = 3 / 60;
const QUIET_FIRINGS = MONTH_S / QUIET_PERIOD_S;
/**
 * A channel host that left (its socket closed for the reboot wave) leaves its ledger a timer due
 * stale_after + 1 s after its last report (src/ledger/quiet.ts, `left`): the simulator's 4 report
 * periods. A host back by then makes it find nothing to do, but it is one alarm and its timer's
 * rows per host rebooted, a cost of the round's reboot wave: the events window holds them all.
 */
const LEFT_AFTER_S = 4 * 60 + 1;

const LEASES_A_MONTH = (MONTH_S * 1000) / INDEX_LEASE_MS;

// The fleet history's rollup (src/history/): once a period, every server's index entry and agent
// instance read; a row written only in a period where a figure of the fleet changed. Per host:
// the reads; the writes are the fleet's (at most one row a period whatever its size), so a host's
// share is billed as if its fleet changed every period and had only the run's hosts (an upper bound).
const ROLLUPS_A_MONTH = (MONTH_S * 1000) / HISTORY_PERIOD_MS;
const historyRollup = (hosts: number) => ({
  d1RowsRead: ROLLUPS_A_MONTH * HISTORY_ROLLUP_ROWS.d1RowsReadPerServer,
  d1RowsWritten: (ROLLUPS_A_MONTH * HISTORY_ROLLUP_ROWS.d1RowsWrittenPerChange) / hosts,
});
const historyWhy = (hosts: number) =>
  `the history rollup once every ${HISTORY_PERIOD_MS / 60_000} min (${ROLLUPS_A_MONTH.toFixed(0)} a month): ` +
  `${HISTORY_ROLLUP_ROWS.d1RowsReadPerServer} D1 rows read per server, and the fleet's row (${HISTORY_ROLLUP_ROWS.d1RowsWrittenPerChange} rows written) ` +
  `shared by its ${hosts} hosts as if a figure changed every period (test/history.test.ts)`;
const LEASE_REFRESH = {
  usage: {
    d1RowsWritten: LEASES_A_MONTH * LEASE_REFRESH_ROWS.d1RowsWritten,
    d1RowsRead: LEASES_A_MONTH * LEASE_REFRESH_ROWS.d1RowsRead,
    doRowsWritten: LEASES_A_MONTH * LEASE_REFRESH_ROWS.doRowsWritten,
    doRowsRead: LEASES_A_MONTH * LEASE_REFRESH_ROWS.doRowsRead,
  },
  why:
    `the index refresh once a lease (${INDEX_LEASE_MS / 3_600_000} h) of a watched host's row, which a 60 s window does not see: ` +
    `${LEASES_A_MONTH.toFixed(0)} a month, each ${LEASE_REFRESH_ROWS.d1RowsWritten} D1 rows written and ${LEASE_REFRESH_ROWS.d1RowsRead} read, ` +
    `${LEASE_REFRESH_ROWS.doRowsWritten} storage rows written and ${LEASE_REFRESH_ROWS.doRowsRead} read (../lease-refresh.ts)`,
};

/**
 * How simulated hosts talk to Harbormaster: the simulator options that give its hosts that agent
 * loop, and what it costs on a period longer than the steady window can see (per host-month).
 */
const TRANSPORTS: Record<
  string,
  { label: string; sim: Partial<SimOptions>; periodic?: { usage: Partial<Usage>; why: string } }
> = {
  channel: {
    label: "the host channel: a report a minute as a message, changes pushed, pings answered by the runtime",
    sim: { transport: "channel", heartbeatS: 60 },
    periodic: LEASE_REFRESH,
  },
  http: {
    label:
      "the long poll GET /v1/agent/desired?wait=60, held in the Worker, carrying the heartbeat (X-Report-Tag); a report only on change",
    sim: { transport: "http", waitS: 60, heartbeatS: 60 },
    // Neither the lease's refresh nor the quiet watch's alarm (src/ledger/quiet.ts: once per
    // stale_after + its grace, the simulator's fleet having stale_after 4 report periods) falls in
    // the steady window: every host's last report before it was at most 160 s earlier (the
    // events), and the first of these comes 480 s after it. The quiet watch moving on writes two
    // storage rows, its timer's row and the alarm set again; the heartbeat the polls carry is not
    // stored (test/poll-heartbeat.test.ts pins both), but when a firing is in doubt: one alarm more
    // and one heartbeat stored.
    periodic: {
      usage: {
        ...LEASE_REFRESH.usage,
        doRowsRead: LEASE_REFRESH.usage.doRowsRead,
        doRequests: QUIET_FIRINGS * (1 + QUIET_DOUBT_SHARE),
        invocations: QUIET_FIRINGS * (1 + QUIET_DOUBT_SHARE),
        alarmsSet: QUIET_FIRINGS * (1 + QUIET_DOUBT_SHARE),
        doRowsWritten: LEASE_REFRESH.usage.doRowsWritten + QUIET_FIRINGS * (2 + 3 * QUIET_DOUBT_SHARE),
      },
      why:
        `${LEASE_REFRESH.why}; the quiet watch's alarm, once per stale_after + its grace (${QUIET_PERIOD_S} s here): ` +
        `${QUIET_FIRINGS.toFixed(0)} DO requests and twice as many storage rows written a month (its timer, and the alarm set again), ` +
        `and for the ${(QUIET_DOUBT_SHARE * 100).toFixed(0)} % of them in doubt (a host between two polls, its ledger evicted) one more alarm and the next heartbeat stored; ` +
        `the heartbeat the polls carry is otherwise not stored (memory and the poll's waiter hold it)`,
    },
  },
};

/** A transport's periodic items with the history rollup's added (the same on every transport). */
function withHistory(periodic: { usage: Partial<Usage>; why: string } | undefined, hosts: number) {
  const h = historyRollup(hosts);
  const usage = { ...periodic?.usage };
  usage.d1RowsRead = (usage.d1RowsRead ?? 0) + h.d1RowsRead;
  usage.d1RowsWritten = (usage.d1RowsWritten ?? 0) + h.d1RowsWritten;
  return { usage, why: [periodic?.why, historyWhy(hosts)].filter(Boolean).join("; ") };
}

const STEADY_S = 60;
const RAMP_S = 10;
const REBOOT_RATE = 0.2;
const SINGLE_CHANGES = 5;
const IDLE_S = 10;
/** How long past its earliest start the steady window may wait for the cron to go quiet (channel). */
const DRAIN_WAIT_S = 240;
/** Room after the last left timer's due time: an alarm fires a little late. */
const LEFT_MARGIN_S = 10;
/** How near a period's start a tick may roll the history up: the ticks' own lateness, with room. */
const ROLLUP_MARGIN_MS = 10_000;

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

export async function run(ctx: BenchContext) {
  // Minutes of real time per transport: only when asked for.
  if (!process.argv.slice(2).includes("cost") && !process.env.BENCH_COST_TRANSPORT) {
    ctx.note("cost: skipped (run `npm run bench -- cost`, or set BENCH_COST_TRANSPORT)", "-");
    return;
  }
  const opt = (name: string, fallback: string) =>
    ctx.option(name) ?? process.env[`BENCH_COST_${name.toUpperCase()}`] ?? fallback;
  const names = opt("transport", "channel,http").split(",");
  for (const name of names)
    if (!TRANSPORTS[name]) throw new Error(`--transport ${name}: known are ${Object.keys(TRANSPORTS).join(", ")}`);
  // Each transport on a server of its own, so no fleet's alarms or deliveries fall in another's
  // windows; side by side (the default), since what is billed is counted, not timed, and a run
  // takes minutes of real time: `--sequential` runs one after the other (the Worker's CPU line
  // over HTTP is calibrated per request on its own server's runtime either way).
  const sequential = ctx.option("sequential") !== undefined || process.env.BENCH_COST_SEQUENTIAL === "1";
  const own = async (name: string) => {
    const server = await ctx.privateServer();
    try {
      return await measure({ ...ctx, ...server }, name, opt);
    } finally {
      server.stop();
    }
  };
  const bills: TransportBill[] = [];
  if (sequential) for (const name of names) bills.push(await own(name));
  else bills.push(...(await Promise.all(names.map(own))));
  compare(bills);
  ctx.note(
    "cost: a 50 MB image rolled out to 10,000 hosts, at list price",
    `$${imageRolloutBill(50, 10_000).toFixed(4)}`,
  );
}

/** One transport's run: its own fleet, the windows read from the meter, its itemized bill. */
async function measure(
  ctx: BenchContext,
  transportName: string,
  opt: (name: string, fallback: string) => string,
): Promise<TransportBill> {
  const transport = TRANSPORTS[transportName];
  const hosts = Number(opt("hosts", "150"));
  const durationS = Number(opt("duration", "180"));
  const rounds = Number(opt("rounds", "4"));
  const joinS = RAMP_S + 5;
  if (!(durationS >= joinS + 60 + STEADY_S)) throw new Error(`--duration must be at least ${joinS + 60 + STEADY_S} s`);
  // The periodic items above are added by arithmetic because the steady window cannot see them.
  if (transportName === "http" && durationS > joinS + QUIET_PERIOD_S)
    throw new Error(`--duration for http: at most ${joinS + QUIET_PERIOD_S} s`);

  const base = ctx.base;
  const meter = async (reset: boolean): Promise<Reading> => {
    const res = await fetch(`${base}/__local/meter`, { method: reset ? "DELETE" : "GET" });
    if (!res.ok) throw new Error(`/__local/meter: ${res.status}`);
    return (await res.json()) as Reading;
  };
  // The runtime's CPU while nothing is asked of it, per ms.
  const idleFrom = ctx.serverCpuMs();
  await sleep(IDLE_S * 1000);
  const idleTo = ctx.serverCpuMs();
  const idleRate = idleFrom === null || idleTo === null ? 0 : (idleTo - idleFrom) / (IDLE_S * 1000);

  const windows: Window[] = [];
  let cpuAt = ctx.serverCpuMs();
  const close = async (name: string) => {
    const reading = await meter(true);
    const cpu = ctx.serverCpuMs();
    const cpuMs = cpu === null || cpuAt === null ? null : cpu - cpuAt;
    windows.push({ name, s: reading.window.ms / 1000, reading, cpuMs, idleCpuMs: idleRate * reading.window.ms });
    cpuAt = cpu;
  };
  const baseline = await meter(true);
  const storedOf = (r: Reading) => ({
    doBytes: Object.values(r.objects).reduce((n, c) => n + (c.storage?.stored_bytes ?? 0), 0),
    d1Bytes: r.d1_stored_bytes,
  });

  const { runSim, DEFAULTS } = (await tsImport(
    "../../../sim/simulator.ts",
    import.meta.url,
  )) as typeof import("../../../sim/simulator.ts");
  const { Api } = (await tsImport("../../../cli/api.ts", import.meta.url)) as typeof import("../../../cli/api.ts");
  const api = new Api(ctx.base, ctx.admin);
  const fleet = `cost-${transportName}-${Date.now().toString(36)}`;
  const stop = new AbortController();
  // The simulator samples its reboot group's holders four times a second, to check that slots are
  // never exceeded: an operator's view at a rate no deployment sees, so it is answered here and not
  // billed. Everything else its hosts and operator send goes to the server.
  const sampled = `/v1/fleets/${fleet}/reboot-groups/${DEFAULTS.group}`;
  const simFetch: FetchLike = (input, init) => {
    const url = new URL(input instanceof Request ? input.url : input);
    if ((init?.method ?? "GET") === "GET" && url.pathname === sampled)
      return Promise.resolve(Response.json({ slots: 0, holders: [], queue: [] }));
    return fetch(input, init);
  };
  // t0: when the hosts' loops began (the simulator's first progress report comes a second later).
  let t0: number | null = null;
  let markStarted = () => {};
  const started = new Promise<void>((resolve) => (markStarted = resolve));
  const at = async (s: number) => {
    await started;
    await sleep(Math.max(0, t0! + s * 1000 - Date.now()));
  };
  const events: string[] = [];

  // The reboot wave: the simulator reboots its rebooting hosts between 15% and 50% of `durationS`
  // (sim/simulator.ts), so the events window starts before it and the steady window after.
  const steadyFrom = durationS - STEADY_S;
  if (0.15 * durationS < joinS || 0.5 * durationS > steadyFrom - 10)
    throw new Error("the reboot wave would fall outside the events window: raise --duration");
  const sim = runSim({
    ...DEFAULTS,
    ...transport.sim,
    url: ctx.base,
    token: ctx.admin,
    fleet,
    servers: hosts,
    // Stopped by this scenario once the steady window is read (before any long poll is cut); the
    // reboot wave still falls within `durationS` (before the steady window).
    durationS: durationS + LEFT_AFTER_S + DRAIN_WAIT_S + 120,
    faultsWithinS: durationS,
    rampS: RAMP_S,
    rebootRate: REBOOT_RATE,
    slots: 5,
    changeAtS: joinS + 5,
    stateFile: null,
    fetch: simFetch,
    signal: stop.signal,
    progressEveryMs: 1000,
    onProgress: () => {
      if (t0 === null) {
        t0 = Date.now() - 1000;
        markStarted();
      }
    },
  });

  // The cron, every minute from 30 s on, as deployed; each tick's own D1 rows, read from the
  // meter around it (ticks and windows' closes take turns, so no close falls inside a tick).
  let turn: Promise<unknown> = Promise.resolve();
  const inTurn = <T>(f: () => Promise<T>): Promise<T> => {
    const done = turn.then(f);
    turn = done.catch(() => {});
    return done;
  };
  // A run's work goes on after its answer (waitUntil): its rows are all in once none is pending.
  const cronRows = async () => {
    for (let waited = 0; ; waited += 100) {
      const { cron_d1, cron_pending } = (await meter(false)).worker;
      if (!cron_pending) return cron_d1;
      if (waited > 30_000) throw new Error("the cron's run did not settle within 30 s");
      await sleep(100);
    }
  };
  const tick = () =>
    inTurn(async () => {
      const before = await cronRows();
      await fetch(`${base}/__scheduled?cron=${encodeURIComponent("* * * * *")}`).then((r) => r.arrayBuffer());
      const after = await cronRows();
      return { written: after.rows_written - before.rows_written, read: after.rows_read - before.rows_read };
    });
  const closing = (name: string) => inTurn(() => close(name));
  /** Seconds after t0 of the cron's n-th tick. */
  const tickAt = (n: number) => 30 + 60 * n;
  // The history's rollup runs on the first tick of each 5-minute period (src/history/): it is
  // added by arithmetic once a period, so no tick of the steady window may be one. A tick within
  // this margin of a period's start, or after one the tick before could have missed, might be.
  const mayRollUp = (n: number) => {
    const at = t0! + tickAt(n) * 1000;
    return periodOf(at + ROLLUP_MARGIN_MS) !== periodOf(at - 60_000 - ROLLUP_MARGIN_MS);
  };
  // The last second at which the steady window may end: over HTTP, before the first of the quiet
  // watch's alarms (added by arithmetic); on the channel, a few minutes after --duration.
  // The earliest second at which the steady window may open: after --duration's events, and on the
  // channel after the reboot wave's left timers (the wave is over by half of --duration).
  const steadyOpensFrom =
    transportName === "channel" ? Math.max(steadyFrom, 0.5 * durationS + LEFT_AFTER_S + LEFT_MARGIN_S) : steadyFrom;
  const steadyEndsBy = transportName === "http" ? joinS + QUIET_PERIOD_S : steadyOpensFrom + STEADY_S + DRAIN_WAIT_S;
  const drain: { s: number; written: number; read: number }[] = [];
  // The memory of this run's own runtime (found by its port: not the bench's process, nor another
  // transport's server) while every host is still connected.
  let steadyRssMb = null as number | null;

  const script = (async () => {
    await started;
    await closing("setup");
    let operatorDone = false;
    const operator = (async () => {
      await at(joinS);
      await closing("join");
      events.push("1 desired change to every host (the simulator's, at the start of the window)");

      // A few operators' edits to single servers.
      await at(joinS + 20);
      const servers = (await api.listServers({ fleet })).slice(0, SINGLE_CHANGES);
      for (const s of servers) {
        const d = await api.getDesired(s.id);
        await api.putDesired(s.id, {
          generation: d.generation + 1,
          agents: d.agents
            .map((a, i) => (i === d.agents.length - 1 ? { ...a, version: `${a.version}-edit` } : a))
            .map(({ name, image, version }) => ({ name, image, version })),
        });
      }
      events.push(`${servers.length} single-server desired changes`);

      // One rollout of an agent to every host, watched as an operator would, every 5 s.
      await at(joinS + 30);
      const rollout = await api.startRollout({ fleet, agent: "sim-a0", image: "sim/agent-0:v3", version: "v3" });
      let state = rollout.state;
      while (state === "running" && Date.now() < t0! + (steadyFrom - 5) * 1000) {
        await sleep(5000);
        state = (await api.getRollout(rollout.id)).state;
      }
      events.push(`1 rollout of sim-a0 to ${rollout.total} hosts (${state})`);
      operatorDone = true;
    })();

    // The events window runs until the cron has handed on the events' audit rows (500 a tick,
    // src/audit/events.service.ts: each tick moves its cursor, and claims and releases the batch's
    // range: 4 rows, the claim's insert being 2, its row and its primary key's entry) and has gone
    // quiet: the steady window opens half a minute after a tick that wrote no D1 row, once the
    // events and their timers are over (steadyOpensFrom), and holds the next tick, which must not
    // be a period's rollup. Whatever the cron does before then is the events' (and a deployment's
    // once: its rows are not the hosts'), not the steady rate.
    let steadyTick: { written: number; read: number } | null = null;
    for (let n = 0; ; n++) {
      await at(tickAt(n));
      const rows = await tick();
      if (tickAt(n) + 30 >= steadyFrom) drain.push({ s: tickAt(n), ...rows });
      if (tickAt(n) + 30 < steadyOpensFrom) continue;
      const quiet = rows.written === 0 && operatorDone;
      const last = tickAt(n + 2) + 30 > steadyEndsBy;
      if (!last && (!quiet || mayRollUp(n + 1))) continue;
      await at(tickAt(n) + 30);
      await closing("events");
      await at(tickAt(n + 1));
      steadyTick = await tick();
      await at(tickAt(n + 1) + 30);
      await closing("steady");
      steadyRssMb = runtimeRssMbAt(base);
      if (!quiet) events.push(`the cron was still writing when the steady window had to open (${rows.written} rows)`);
      break;
    }
    await operator;
    events.push(
      `the cron's ticks from ${drain[0]?.s} s until the steady window, D1 rows written / read: ${drain.map((d) => `${d.written} / ${d.read}`).join(", ")}`,
    );
    if (steadyTick?.written)
      events.push(
        `the steady window's cron tick wrote ${steadyTick.written} D1 rows: not a quiet tick, and its rate is billed a month`,
      );
    stop.abort();
  })();
  const [summary] = (await Promise.all([sim, script])) as [SimSummary, void];
  ctx.note(
    `cost (${transportName}): local runtime RSS, ${hosts} hosts at the steady window's end (MB; not billed: an awake object is priced at 128 MB)`,
    steadyRssMb === null ? "- (/proc did not tell)" : steadyRssMb.toFixed(0),
  );
  // Over HTTP a host makes a Worker request a minute, so its CPU is a line of the bill: measured
  // in short bursts once the hosts stopped (../cpu.ts), not shared out of the run's window.
  const cpu = transportName === "http" ? await calibrateCpu(ctx, `${fleet}-cpu`) : null;
  events.push(
    `reboot wave: ${summary.reboots.granted} of ${hosts} hosts rebooted through FleetLock (${summary.reboots.refusals} refusals)`,
  );
  // What the run's hosts left stored (their ledgers, the fleet's coordinator and rollout, their
  // index rows and audit), per host: the state at the end less the state before the setup.
  const [before, after] = [storedOf(baseline), storedOf(windows.at(-1)!.reading)];
  const stored = {
    doBytes: (after.doBytes - before.doBytes) / hosts,
    d1Bytes: (after.d1Bytes - before.d1Bytes) / hosts,
  };
  return report(ctx, {
    transport: transportName,
    label: transport.label,
    hosts,
    rounds,
    windows,
    events,
    summary,
    periodic: withHistory(transport.periodic, hosts),
    stored,
    cpu,
  });
}
