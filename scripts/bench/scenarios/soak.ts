// `npm run bench -- soak [--hosts 6000] [--minutes 10 | --duration 600] [--ramp 120] [--concurrency 32]`:
// can this machine serve HOSTS simulated hosts on the host channel for that long? The simulator (in
// this process) registers them (each with its first desired config in the same task), brings them
// up over RAMP seconds, then lets them run the default loop (a report a minute over the channel,
// keep-alive pings) with one desired change to every host a minute in. Every 30 s it samples
// memory: this process's resident set and heap (the simulator: its hosts, their sockets and its
// own bookkeeping) and the local runtime's resident set (the one workerd serving the hosts, from
// /proc), the runtime's open files by kind, the load average, with the reports and errors so far.
// It prints the set-up's pace and the runtime CPU it cost per host, the samples, the growth of
// each memory figure over the steady part (after the ramp and the change), the files per host, the
// failed reports, and how fast the change reached connected hosts.
// The hosts are served by Harbormaster in one workerd with nothing in front (../direct-server.ts),
// not by the benchmark's `wrangler dev` server, whose proxy worker holds every socket a second time.
// Only when named: registering thousands of servers takes minutes.
import { readdirSync, readFileSync } from "node:fs";
import { loadavg } from "node:os";
import { tsImport } from "tsx/esm/api";
import { startDirectServer, type DirectServer } from "../direct-server.ts";
import type { BenchContext } from "../run.ts";

const SAMPLE_MS = 30_000;
const SETUP_REPORT_MS = 15_000;
// Measured: the runtime's open files per connected host at the peak (the ramp and the change's
// minute): two descriptors for each host's socket (the runtime dup()s every connection it
// accepts), plus the SQLite database, -wal and -shm of every ledger awake at that moment (an object
// sleeps 10 s after its last request): 2.74 a host at 5,500 hosts, 2.5 in the steady part
// (docs/benchmarks.md, the soak's section).
const FILES_PER_HOST = 3;
// The runtime's own descriptors (listeners, pipes, the D1 and coordinator databases) and headroom.
const FILES_BESIDE = 1_000;

interface Sample {
  s: number;
  load1: number;
  simRssMb: number;
  simHeapMb: number;
  simFiles: number | null;
  serverRssMb: number | null;
  serverCpuMs: number | null;
  serverFiles: number | null;
  serverSockets: number | null;
  serverSqliteFiles: number | null;
  reports: number;
  errors: number;
}

/**
 * How many hosts connected on the channel the local runtime can hold, at `filesPerHost` each: it
 * inherits this process's open-files limit and aborts when it cannot open one more.
 */
export function channelHostsThatFit(filesPerHost = FILES_PER_HOST) {
  let limit = Infinity;
  try {
    limit = Number(/Max open files\s+(\d+)/.exec(readFileSync("/proc/self/limits", "utf8"))?.[1] ?? Infinity);
  } catch {
    // no /proc: no bound known
  }
  return {
    limit,
    hosts: Math.max(0, Math.floor((limit - FILES_BESIDE) / filesPerHost)),
    need: (hosts: number) => hosts * filesPerHost + FILES_BESIDE,
  };
}

const openFilesOfThisProcess = () => {
  try {
    return readdirSync("/proc/self/fd").length;
  } catch {
    return null;
  }
};

export async function run(ctx: BenchContext) {
  if (!process.argv.slice(2).includes("soak")) {
    ctx.note("soak: skipped (run `npm run bench -- soak`)", "-");
    return;
  }
  const hosts = Number(ctx.option("hosts") ?? 6_000);
  const minutes = ctx.option("minutes");
  const durationS = minutes === undefined ? Number(ctx.option("duration") ?? 600) : Number(minutes) * 60;
  const rampS = Number(ctx.option("ramp") ?? 120);
  const concurrency = Number(ctx.option("concurrency") ?? 32);
  for (const [name, v, min] of [
    ["hosts", hosts, 1],
    ["duration", durationS, 1],
    ["ramp", rampS, 1],
    ["concurrency", concurrency, 1],
  ] as const) {
    if (!Number.isFinite(v) || v < min) throw new Error(`soak: --${name} must be a number ≥ ${min}, not ${v}`);
  }
  const { runSim, DEFAULTS } = (await tsImport(
    "../../../sim/simulator.ts",
    import.meta.url,
  )) as typeof import("../../../sim/simulator.ts");
  // The local runtime holds, per host, its socket twice and, while the host's ledger is awake, that
  // ledger's SQLite file with its -wal and -shm: about FILES_PER_HOST open files at the peak, and
  // it aborts when it cannot open one more (the runtime inherits this process's limit). This
  // process holds one socket per host. Refused up front rather than after minutes of set-up.
  const fit = channelHostsThatFit();
  if (hosts > fit.hosts) {
    throw new Error(
      `soak: ${hosts} hosts need about ${fit.need(hosts)} open files in the runtime; this process may open ${fit.limit} (ulimit -n): at most ${fit.hosts} hosts`,
    );
  }
  const server = await startDirectServer();
  try {
    await soak(ctx, server, runSim, DEFAULTS, { hosts, durationS, rampS, concurrency });
  } finally {
    await server.stop();
  }
}

async function soak(
  ctx: BenchContext,
  server: DirectServer,
  runSim: typeof import("../../../sim/simulator.ts").runSim,
  DEFAULTS: typeof import("../../../sim/simulator.ts").DEFAULTS,
  { hosts, durationS, rampS, concurrency }: { hosts: number; durationS: number; rampS: number; concurrency: number },
) {
  const mb = (n: number) => n / 2 ** 20;
  const samples: Sample[] = [];
  let progress = { reports: 0, errors: 0 };
  let started: number | null = null;
  let timer: ReturnType<typeof setInterval> | null = null;
  const sample = () => {
    const m = process.memoryUsage();
    const kinds = server.openFileKinds();
    samples.push({
      s: Math.round((Date.now() - started!) / 1000),
      load1: loadavg()[0],
      simRssMb: mb(m.rss),
      simHeapMb: mb(m.heapUsed),
      simFiles: openFilesOfThisProcess(),
      serverRssMb: server.rssMb(),
      serverCpuMs: server.cpuMs(),
      serverFiles: kinds?.total ?? server.openFiles(),
      serverSockets: kinds?.sockets ?? null,
      serverSqliteFiles: kinds?.sqlite ?? null,
      ...progress,
    });
  };
  const setupStarted = Date.now();
  const setupCpu0 = server.cpuMs();
  const setupLoads: number[] = [];
  let setupCpuMs: number | null = null;
  let setupS = 0;
  let peakSetupFiles = 0;
  let lastSetupReport = setupStarted;
  const summary = await runSim({
    ...DEFAULTS,
    url: server.url,
    token: server.admin,
    fleet: `soak-${Date.now().toString(36)}`,
    servers: hosts,
    durationS: rampS + durationS,
    rampS,
    transport: "channel",
    heartbeatS: 60,
    changeAtS: rampS + 60,
    setupConcurrency: concurrency,
    orderAtRegistration: true,
    stateFile: null,
    progressEveryMs: 5_000,
    onSetup: (p) => {
      const now = Date.now();
      if (p.ordered < p.total && now - lastSetupReport < SETUP_REPORT_MS) return;
      lastSetupReport = now;
      setupLoads.push(loadavg()[0]);
      peakSetupFiles = Math.max(peakSetupFiles, server.openFiles() ?? 0);
      const s = (now - setupStarted) / 1000;
      console.error(
        `soak: set-up ${s.toFixed(0)} s: ${p.registered}/${p.total} registered, ${p.ordered} ordered (${(p.ordered / s).toFixed(1)} hosts/s); runtime files ${server.openFiles() ?? "-"}; load ${loadavg()[0].toFixed(1)}`,
      );
    },
    onProgress: (p) => {
      if (started === null) {
        started = Date.now() - 5_000;
        setupS = (started - setupStarted) / 1000;
        const cpu = server.cpuMs();
        setupCpuMs = cpu === null || setupCpu0 === null ? null : cpu - setupCpu0;
        console.error(`soak: ${hosts} hosts set up in ${setupS.toFixed(0)} s; running ${rampS + durationS} s`);
        sample();
        timer = setInterval(sample, SAMPLE_MS);
      }
      progress = { reports: p.ops, errors: p.errors };
    },
  });
  if (timer) clearInterval(timer);
  sample();

  const log = (line = "") => console.log(line);
  const fmtLoad = (xs: number[]) =>
    xs.length ? `${Math.min(...xs).toFixed(1)}–${Math.max(...xs).toFixed(1)}` : loadavg()[0].toFixed(1);
  log(`\n## Soak: ${hosts} hosts on the host channel, ${rampS} s ramp + ${durationS} s\n`);
  log(
    `Set-up: ${setupS.toFixed(0)} s for ${hosts} hosts (${(hosts / setupS).toFixed(1)} a second, ${concurrency} at a time, each registered and given its first desired config), load ${fmtLoad(setupLoads)}; ` +
      `runtime CPU ${setupCpuMs === null ? "-" : `${(setupCpuMs / 1000).toFixed(0)} s, ${(setupCpuMs / hosts).toFixed(1)} ms a host`}; runtime files at most ${peakSetupFiles}.\n`,
  );
  log(
    "| t (s) | load (1 min) | simulator RSS (MB) | simulator heap (MB) | simulator open files | local runtime RSS (MB) | runtime open files | of which sockets | of which SQLite | files a host | host operations so far | errors so far |",
  );
  log("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
  const perHost = (n: number | null) => (n === null ? "-" : (n / hosts).toFixed(2));
  for (const x of samples)
    log(
      `| ${x.s} | ${x.load1.toFixed(1)} | ${x.simRssMb.toFixed(0)} | ${x.simHeapMb.toFixed(0)} | ${x.simFiles ?? "-"} | ${x.serverRssMb?.toFixed(0) ?? "-"} | ${x.serverFiles ?? "-"} | ${x.serverSockets ?? "-"} | ${x.serverSqliteFiles ?? "-"} | ${perHost(x.serverFiles)} | ${x.reports} | ${x.errors} |`,
    );
  // Steady: after the ramp and the change's minute.
  const steady = samples.filter((x) => x.s >= rampS + 120);
  const growth = (f: (x: Sample) => number | null) => {
    if (steady.length < 2) return "-";
    const a = f(steady[0]);
    const b = f(steady.at(-1)!);
    return a === null || b === null
      ? "-"
      : `${a.toFixed(0)} → ${b.toFixed(0)} MB over ${steady.at(-1)!.s - steady[0].s} s (${(((b - a) / a) * 100).toFixed(1)}%)`;
  };
  const files = samples.map((x) => x.serverFiles).filter((n): n is number => n !== null);
  const steadyFiles = steady.map((x) => x.serverFiles).filter((n): n is number => n !== null);
  log(
    `\nSteady growth: simulator RSS ${growth((x) => x.simRssMb)}, heap ${growth((x) => x.simHeapMb)}; local runtime RSS ${growth((x) => x.serverRssMb)}.`,
  );
  log(
    `Runtime open files: at most ${files.length ? Math.max(...files) : "-"} (${files.length ? perHost(Math.max(...files)) : "-"} a host), steady ${steadyFiles.length ? `${Math.min(...steadyFiles)}–${Math.max(...steadyFiles)}` : "-"}; load over the run ${fmtLoad(samples.map((x) => x.load1))}.`,
  );
  const [first, last] = [steady[0], steady.at(-1)];
  const steadyCpu =
    first && last && first.serverCpuMs !== null && last.serverCpuMs !== null && last.reports > first.reports
      ? `${(last.serverCpuMs - first.serverCpuMs).toFixed(0)} ms over ${last.s - first.s} s: ${((last.serverCpuMs - first.serverCpuMs) / (last.reports - first.reports)).toFixed(2)} ms a host operation, ${(((last.serverCpuMs - first.serverCpuMs) / ((last.s - first.s) * 1000)) * 100).toFixed(0)}% of one core`
      : "-";
  log(`Runtime CPU over the steady part: ${steadyCpu}.`);
  log(
    `Reports: ${summary.ops.reports}; errors: ${summary.ops.errors} ${JSON.stringify(summary.errors_by_kind)}; channel sockets opened ${summary.channel.opened}, closed ${summary.channel.closed}; last status ${JSON.stringify(summary.byStatus)}.`,
  );
  log(
    `${summary.latency_ms.push_p50 === null ? "No change reached a connected host (it is written a minute after the ramp)" : `The change reached connected hosts in p50 ${summary.latency_ms.push_p50} ms, p99 ${summary.latency_ms.push_p99} ms (from the write; ${hosts} writes at ${concurrency} at a time)`}; report ack p50 ${summary.latency_ms.report_p50} ms, p99 ${summary.latency_ms.report_p99} ms.`,
  );
  log(
    `Simulator CPU: ${summary.overhead.cpu_ms} ms; event loop ${Math.round(summary.overhead.event_loop_utilization * 100)}% busy. Runtime restarts (crashes): ${server.restarts()}.\n`,
  );
  ctx.note(`soak (${hosts} hosts, channel): set-up s`, Math.round(setupS));
  ctx.note(`soak (${hosts} hosts, channel): errors`, summary.ops.errors);
  ctx.note(`soak (${hosts} hosts, channel): reports`, summary.ops.reports);
  ctx.note(`soak (${hosts} hosts, channel): runtime files at most`, files.length ? Math.max(...files) : "-");
  ctx.note(`soak (${hosts} hosts, channel): runtime restarts`, server.restarts());
}
