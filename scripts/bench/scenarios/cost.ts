// `npm run bench -- cost [--transport http] [--hosts 150] [--duration 180] [--rounds 4]`: what a
// fleet would pay Cloudflare. The simulator (sim/) plays HOSTS hosts in real time (no time
// compression), each running the reference agent loop of the chosen transport, and the local
// meter (src/objects/kit/meter.ts, /__local/meter) counts what a deployment is billed for, in
// windows:
//   setup   registration and first desired configs (one-off per host: shown, not in the bill);
//   join    hosts come up over the first RAMP_S seconds (shown, not in the bill);
//   events  one fleet-wide desired change, a few single-server changes, one rollout of an agent
//           to every host, and one reboot wave (REBOOT_RATE of the hosts, through FleetLock);
//   steady  the last STEADY_S seconds (whole report periods): nothing but the agent loop.
// The bill per host-month is the steady rate over 30 days plus ROUNDS rounds of events (each the
// events window less the steady rate over its length), at the list prices of ../prices.ts, for
// 1,000 / 10,000 / 100,000 hosts beyond the plan's included amounts. The cron runs every 60 s
// (through /__scheduled) as it does deployed.
// Worker CPU is an estimate: the local runtime's CPU time over the window (workerd, from /proc),
// less its idle rate (measured before the run), shared between the Worker's requests and the
// objects' in proportion to their counts (objects are billed for duration, not CPU). It runs the
// local D1 and the dev server's plumbing too, and on a shared machine, so it errs high.
import { tsImport } from "tsx/esm/api";
import type { FetchLike } from "../../../agent/http.ts";
import type { SimOptions, SimSummary } from "../../../sim/simulator.ts";
import type { BenchContext } from "../run.ts";
import { DO_GB, MONTH_S, PRICES, PRICES_READ_ON, type Price } from "../prices.ts";

/**
 * How simulated hosts talk to Harbormaster: the simulator options that give its hosts that agent
 * loop. A transport the simulator learns (say, `channel`) is one more entry here.
 */
const TRANSPORTS: Record<string, { label: string; sim: Partial<SimOptions> }> = {
  http: { label: "report every 60 s; between reports the long poll GET /v1/agent/desired?wait=55 parks in the server's ledger", sim: { waitS: 55, heartbeatS: 60 } },
};

const STEADY_S = 60;
const RAMP_S = 10;
const REBOOT_RATE = 0.2;
const SINGLE_CHANGES = 5;
const IDLE_S = 10;
const FLEETS = [1_000, 10_000, 100_000];

interface Rows { statements: number; rows_read: number; rows_written: number }
interface ClassReading { requests: number; awake_ms: number; idle_tail_ms: number; parked_ms: number; instances: number; d1: Rows; methods: Record<string, { calls: number; ms: number }> }
interface Reading { window: { ms: number }; worker: { requests: number; scheduled: number; d1: Rows }; objects: Record<string, ClassReading>; d1_unattributed: Rows; d1_rows_metered: boolean }
interface Window { name: string; s: number; reading: Reading; cpuMs: number | null; idleCpuMs: number }

const ITEMS = ["workerRequests", "workerCpuMs", "doRequests", "doGbSeconds", "d1RowsRead", "d1RowsWritten"] as const;
type Item = (typeof ITEMS)[number];
type Usage = Record<Item, number> & { doGbSecondsTail: number };
const LABEL: Record<Item, string> = {
  workerRequests: "Worker requests",
  workerCpuMs: "Worker CPU ms (estimate)",
  doRequests: "DO requests",
  doGbSeconds: "DO duration, GB-s",
  d1RowsRead: "D1 rows read",
  d1RowsWritten: "D1 rows written",
};

function usageOf(w: Window): Usage {
  const r = w.reading;
  const classes = Object.values(r.objects);
  const rows = [r.worker.d1, r.d1_unattributed, ...classes.map((c) => c.d1)];
  const sum = (f: (c: ClassReading) => number) => classes.reduce((n, c) => n + f(c), 0);
  const workerRequests = r.worker.requests + r.worker.scheduled;
  const doRequests = sum((c) => c.requests);
  const busyCpuMs = Math.max(0, (w.cpuMs ?? 0) - w.idleCpuMs);
  return {
    workerRequests,
    workerCpuMs: workerRequests ? (busyCpuMs * workerRequests) / (workerRequests + doRequests) : 0,
    doRequests,
    doGbSeconds: (sum((c) => c.awake_ms) / 1000) * DO_GB,
    doGbSecondsTail: (sum((c) => c.awake_ms + c.idle_tail_ms) / 1000) * DO_GB,
    d1RowsRead: rows.reduce((n, x) => n + x.rows_read, 0),
    d1RowsWritten: rows.reduce((n, x) => n + x.rows_written, 0),
  };
}
const combine = (a: Usage, b: Usage, k = 1) =>
  Object.fromEntries(Object.keys(a).map((key) => [key, a[key as keyof Usage] + k * b[key as keyof Usage]])) as Usage;
const scale = (a: Usage, k: number) => combine(a, a, k - 1);
const clamp = (a: Usage) => Object.fromEntries(Object.entries(a).map(([k, v]) => [k, Math.max(0, v)])) as Usage;
const charge = (p: Price, used: number) => Math.max(0, used - p.includedPerMonth) * p.usdPerUnit;

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const si = (n: number) => (n >= 1e9 ? `${(n / 1e9).toFixed(2)}G` : n >= 1e6 ? `${(n / 1e6).toFixed(2)}M` : n >= 1e4 ? `${(n / 1e3).toFixed(1)}k` : n.toFixed(n < 10 ? 2 : 0));
const usd = (n: number) => `$${n < 1 ? n.toFixed(4) : n.toFixed(2)}`;

export async function run(ctx: BenchContext) {
  const opt = (name: string, fallback: string) => ctx.option(name) ?? process.env[`BENCH_COST_${name.toUpperCase()}`] ?? fallback;
  const transportName = opt("transport", "http");
  const transport = TRANSPORTS[transportName];
  if (!transport) throw new Error(`--transport ${transportName}: known are ${Object.keys(TRANSPORTS).join(", ")}`);
  const hosts = Number(opt("hosts", "150"));
  const durationS = Number(opt("duration", "180"));
  const rounds = Number(opt("rounds", "4"));
  const joinS = RAMP_S + 5;
  if (!(durationS >= joinS + 60 + STEADY_S)) throw new Error(`--duration must be at least ${joinS + 60 + STEADY_S} s`);

  const meter = async (reset: boolean): Promise<Reading> => {
    const res = await fetch(`${ctx.base}/__local/meter`, { method: reset ? "DELETE" : "GET" });
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
  await meter(true);

  const { runSim, DEFAULTS } = (await tsImport("../../../sim/simulator.ts", import.meta.url)) as typeof import("../../../sim/simulator.ts");
  const { Api } = (await tsImport("../../../cli/api.ts", import.meta.url)) as typeof import("../../../cli/api.ts");
  const api = new Api(ctx.base, ctx.admin);
  const fleet = `cost-${Date.now().toString(36)}`;
  const stop = new AbortController();
  // The simulator samples its reboot group's holders four times a second, to check that slots are
  // never exceeded: an operator's view at a rate no deployment sees, so it is answered here and not
  // billed. Everything else its hosts and operator send goes to the server.
  const sampled = `/v1/fleets/${fleet}/reboot-groups/${DEFAULTS.group}`;
  const simFetch: FetchLike = (input, init) => {
    const url = new URL(input instanceof Request ? input.url : input);
    if ((init?.method ?? "GET") === "GET" && url.pathname === sampled) return Promise.resolve(Response.json({ slots: 0, holders: [], queue: [] }));
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
  if (0.15 * durationS < joinS || 0.5 * durationS > steadyFrom - 10) throw new Error("the reboot wave would fall outside the events window: raise --duration");
  const sim = runSim({
    ...DEFAULTS,
    ...transport.sim,
    url: ctx.base,
    token: ctx.admin,
    fleet,
    servers: hosts,
    // Stopped by this scenario once the steady window is read (before any long poll is cut).
    durationS: durationS + 120,
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

  const script = (async () => {
    await started;
    await close("setup");
    // The cron, every minute from 30 s on, as deployed.
    const cron = (async () => {
      for (let s = 30; s < durationS; s += 60) {
        await at(s);
        if (stop.signal.aborted) return;
        await fetch(`${ctx.base}/__scheduled?cron=${encodeURIComponent("* * * * *")}`).then((r) => r.arrayBuffer());
      }
    })();
    await at(joinS);
    await close("join");
    events.push("1 desired change to every host (the simulator's, at the start of the window)");

    // A few operators' edits to single servers.
    await at(joinS + 20);
    const servers = (await api.listServers({ fleet })).slice(0, SINGLE_CHANGES);
    for (const s of servers) {
      const d = await api.getDesired(s.id);
      await api.putDesired(s.id, { generation: d.generation + 1, agents: d.agents.map((a, i) => (i === d.agents.length - 1 ? { ...a, version: `${a.version}-edit` } : a)).map(({ name, image, version }) => ({ name, image, version })) });
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

    await at(steadyFrom);
    await close("events");
    await at(durationS);
    await close("steady");
    stop.abort();
    await cron;
  })();
  const [summary] = (await Promise.all([sim, script])) as [SimSummary, void];
  events.push(`reboot wave: ${summary.reboots.granted} of ${hosts} hosts rebooted through FleetLock (${summary.reboots.refusals} refusals)`);
  report(ctx, { transport: transportName, label: transport.label, hosts, rounds, windows, events, summary });
}

function report(
  ctx: BenchContext,
  r: { transport: string; label: string; hosts: number; rounds: number; windows: Window[]; events: string[]; summary: SimSummary },
) {
  const w = Object.fromEntries(r.windows.map((x) => [x.name, x])) as Record<"setup" | "join" | "events" | "steady", Window>;
  const steady = usageOf(w.steady);
  const perHostMonth = scale(steady, MONTH_S / w.steady.s / r.hosts);
  const perHostRound = scale(clamp(combine(usageOf(w.events), steady, -w.events.s / w.steady.s)), 1 / r.hosts);
  const monthly = combine(perHostMonth, perHostRound, r.rounds);
  const log = (line = "") => console.log(line);

  log(`\n## Cost of ${r.hosts} hosts, transport \`${r.transport}\` (${r.label})\n`);
  log(`Prices: Workers Paid plan list prices read on ${PRICES_READ_ON} (scripts/bench/prices.ts). Measured ${new Date().toISOString().slice(0, 10)}.`);
  log(`Windows (real time): ${r.windows.map((x) => `${x.name} ${x.s.toFixed(0)} s`).join(", ")}. Events: ${r.events.join("; ")}.`);
  log(`Simulator: ${r.summary.ops.polls} polls, ${r.summary.ops.reports} reports, ${r.summary.ops.fleetlock} FleetLock calls, ${r.summary.ops.errors} errors; last status ${JSON.stringify(r.summary.byStatus)}.`);
  log(`Month: the steady window's rate over 30 days plus ${r.rounds} rounds of the events window (less the steady rate over its length). Fleets scale the per-host figures; the bill is what lies beyond the plan's included amounts, plus the plan's $${PRICES.planUsdPerMonth}.\n`);

  const head = ["item", "per host-month", ...FLEETS.map((n) => `${n.toLocaleString("en-US")} hosts`)];
  log(`| ${head.join(" | ")} |`);
  log(`|${head.map((_, i) => (i ? "---:" : "---")).join("|")}|`);
  const totals = FLEETS.map(() => PRICES.planUsdPerMonth);
  for (const item of ITEMS) {
    const price = PRICES[item];
    const cells = FLEETS.map((n, i) => {
      const used = monthly[item] * n;
      const c = charge(price, used);
      totals[i] += c;
      return `${si(used)} → ${usd(c)}`;
    });
    log(`| ${LABEL[item]} | ${si(monthly[item])} (${usd(monthly[item] * price.usdPerUnit)} at list) | ${cells.join(" | ")} |`);
  }
  log(`| **total per month** (plan included) | | ${totals.map((t) => `**${usd(t)}**`).join(" | ")} |`);
  log(`| per host-month | | ${totals.map((t, i) => usd(t / FLEETS[i])).join(" | ")} |`);
  const tail = FLEETS.map((n) => usd(charge(PRICES.doGbSeconds, (perHostMonth.doGbSecondsTail + r.rounds * perHostRound.doGbSecondsTail) * n) - charge(PRICES.doGbSeconds, monthly.doGbSeconds * n)));
  log(`| DO duration if the 10 s idle before hibernation is billed too | | ${tail.map((t) => `+${t}`).join(" | ")} |`);

  log(`\nWhere it comes from (steady window, ${w.steady.s.toFixed(0)} s, ${r.hosts} hosts):\n`);
  log("| source | requests | awake (share of its objects' time) | parked | D1 rows read / written | busiest calls (count, total s) |");
  log("|---|---:|---:|---:|---:|---|");
  const s = w.steady.reading;
  log(`| Worker | ${s.worker.requests} (+${s.worker.scheduled} cron) | | | ${s.worker.d1.rows_read} / ${s.worker.d1.rows_written} | |`);
  for (const [name, c] of Object.entries(s.objects)) {
    const share = c.instances ? c.awake_ms / (c.instances * w.steady.s * 1000) : 0;
    const calls = Object.entries(c.methods).sort((a, b) => b[1].ms - a[1].ms).slice(0, 3).map(([m, u]) => `${m} ${u.calls}, ${(u.ms / 1000).toFixed(0)} s`);
    log(`| ${name} (${c.instances} objects) | ${c.requests.toFixed(0)} | ${(c.awake_ms / 1000).toFixed(0)} s (${(share * 100).toFixed(0)}%) | ${(c.parked_ms / 1000).toFixed(0)} s | ${c.d1.rows_read} / ${c.d1.rows_written} | ${calls.join("; ")} |`);
  }
  const cpu = w.steady.cpuMs;
  log(`\nLocal runtime CPU in the steady window: ${cpu === null ? "not measured (no /proc)" : `${(cpu / 1000).toFixed(1)} s, of which ${(w.steady.idleCpuMs / 1000).toFixed(1)} s its idle rate`}; charged to the Worker: ${(steady.workerCpuMs / Math.max(1, steady.workerRequests)).toFixed(1)} ms per Worker request.`);
  log(`One round of events, per host: ${ITEMS.map((i) => `${LABEL[i]} ${si(perHostRound[i])}`).join(", ")}.`);
  log(`Setup, per host (one-off): ${ITEMS.map((i) => `${LABEL[i]} ${si(usageOf(w.setup)[i] / r.hosts)}`).join(", ")}.`);
  if (!s.d1_rows_metered) log("\nD1 rows were NOT metered (the D1 binding lacks the internal the meter taps): their lines read 0.");
  log("Not metered: Durable Object SQLite storage (rows read and written in objects, and stored GB), D1 storage, Workers Logs.\n");

  ctx.note(`cost (${r.transport}, ${r.hosts} hosts): per host-month at 10,000 hosts`, usd(totals[1] / FLEETS[1]));
  ctx.note(`cost (${r.transport}): DO GB-s per host-month`, si(monthly.doGbSeconds));
}
