// `npm run bench -- soak [--hosts 10000] [--duration 600] [--ramp 120]`: can this machine serve
// HOSTS simulated hosts on the host channel for DURATION seconds? The simulator (in this process)
// registers them, brings them up over RAMP seconds, then lets them run the default loop (a report
// a minute over the channel, keep-alive pings) with one desired change to every host a minute in.
// Every 30 s it samples memory: this process's resident set and heap (the simulator: its hosts,
// their sockets and its own bookkeeping) and the local runtime's resident set (the one workerd
// serving the hosts, from /proc), with the reports and errors so far. It prints the
// samples, the growth of each memory figure over the steady part (after the ramp and the change),
// the failed reports, and how fast the change reached connected hosts.
// The hosts are served by Harbormaster in one workerd with nothing in front (../direct-server.ts),
// not by the benchmark's `wrangler dev` server, whose proxy worker holds every socket a second time.
// Only when named: registering 10,000 servers alone takes minutes.
import { readFileSync } from "node:fs";
import { tsImport } from "tsx/esm/api";
import { startDirectServer } from "../direct-server.ts";
import type { BenchContext } from "../run.ts";

const SAMPLE_MS = 30_000;
// Measured: a 4,000-host run's runtime held 10,200–10,500 descriptors (2.6 a host); 3 leaves room.
const FILES_PER_HOST = 3;

interface Sample {
  s: number;
  simRssMb: number;
  simHeapMb: number;
  serverRssMb: number | null;
  serverFiles: number | null;
  reports: number;
  errors: number;
  channels: number;
}

export async function run(ctx: BenchContext) {
  if (!process.argv.slice(2).includes("soak")) {
    ctx.note("soak: skipped (run `npm run bench -- soak`)", "-");
    return;
  }
  const hosts = Number(ctx.option("hosts") ?? 10_000);
  const durationS = Number(ctx.option("duration") ?? 600);
  const rampS = Number(ctx.option("ramp") ?? 120);
  const { runSim, DEFAULTS } = (await tsImport(
    "../../../sim/simulator.ts",
    import.meta.url,
  )) as typeof import("../../../sim/simulator.ts");
  // The local runtime holds, per host, its socket and, while the host's ledger is awake, that
  // ledger's SQLite file with its -wal and -shm: about FILES_PER_HOST open files, and it aborts
  // when it cannot open one more (the runtime inherits this process's limit). Refused up front
  // rather than after minutes of set-up.
  const fdLimit = Number(/Max open files\s+(\d+)/.exec(readFileSync("/proc/self/limits", "utf8"))?.[1] ?? Infinity);
  if (hosts * FILES_PER_HOST + 1_000 > fdLimit) {
    throw new Error(
      `soak: ${hosts} hosts need about ${hosts * FILES_PER_HOST + 1_000} open files in the runtime; this process may open ${fdLimit} (ulimit -n)`,
    );
  }
  const server = await startDirectServer();
  try {
    await soak(ctx, server, runSim, DEFAULTS, hosts, durationS, rampS);
  } finally {
    await server.stop();
  }
}

async function soak(
  ctx: BenchContext,
  server: Awaited<ReturnType<typeof startDirectServer>>,
  runSim: typeof import("../../../sim/simulator.ts").runSim,
  DEFAULTS: typeof import("../../../sim/simulator.ts").DEFAULTS,
  hosts: number,
  durationS: number,
  rampS: number,
) {
  const mb = (n: number) => n / 2 ** 20;
  const samples: Sample[] = [];
  let progress = { reports: 0, errors: 0, channels: 0 };
  let started: number | null = null;
  let timer: ReturnType<typeof setInterval> | null = null;
  const sample = () => {
    const m = process.memoryUsage();
    samples.push({
      s: Math.round((Date.now() - started!) / 1000),
      simRssMb: mb(m.rss),
      simHeapMb: mb(m.heapUsed),
      serverRssMb: server.rssMb(),
      serverFiles: server.openFiles(),
      ...progress,
    });
  };
  const setupStarted = Date.now();
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
    setupConcurrency: 32,
    stateFile: null,
    progressEveryMs: 5_000,
    onProgress: (p) => {
      if (started === null) {
        started = Date.now() - 5_000;
        console.error(
          `soak: ${hosts} hosts set up in ${((started - setupStarted) / 1000).toFixed(0)} s; running ${rampS + durationS} s`,
        );
        sample();
        timer = setInterval(sample, SAMPLE_MS);
      }
      progress = { reports: p.ops, errors: p.errors, channels: 0 };
    },
  });
  if (timer) clearInterval(timer);
  sample();

  const log = (line = "") => console.log(line);
  log(`\n## Soak: ${hosts} hosts on the host channel, ${rampS} s ramp + ${durationS} s\n`);
  log(
    "| t (s) | simulator RSS (MB) | simulator heap (MB) | local runtime RSS (MB) | runtime open files | host operations so far | errors so far |",
  );
  log("|---:|---:|---:|---:|---:|---:|---:|");
  for (const x of samples)
    log(
      `| ${x.s} | ${x.simRssMb.toFixed(0)} | ${x.simHeapMb.toFixed(0)} | ${x.serverRssMb?.toFixed(0) ?? "-"} | ${x.serverFiles ?? "-"} | ${x.reports} | ${x.errors} |`,
    );
  // Steady: after the ramp and the change's minute.
  const steady = samples.filter((x) => x.s >= rampS + 120);
  const growth = (f: (x: Sample) => number | null) => {
    if (steady.length < 2) return "-";
    const a = f(steady[0]);
    const b = f(steady.at(-1)!);
    return a === null || b === null
      ? "-"
      : `${(b - a).toFixed(0)} MB over ${steady.at(-1)!.s - steady[0].s} s (${(((b - a) / a) * 100).toFixed(1)}%)`;
  };
  log(
    `\nSteady growth: simulator RSS ${growth((x) => x.simRssMb)}, heap ${growth((x) => x.simHeapMb)}; local runtime RSS ${growth((x) => x.serverRssMb)}.`,
  );
  log(
    `Reports: ${summary.ops.reports}; errors: ${summary.ops.errors} ${JSON.stringify(summary.errors_by_kind)}; channel sockets opened ${summary.channel.opened}, closed ${summary.channel.closed}; last status ${JSON.stringify(summary.byStatus)}.`,
  );
  log(
    `The change reached connected hosts in p50 ${summary.latency_ms.push_p50} ms, p99 ${summary.latency_ms.push_p99} ms (from the write; ${hosts} writes at ${DEFAULTS.setupConcurrency * 2} at a time); report ack p50 ${summary.latency_ms.report_p50} ms, p99 ${summary.latency_ms.report_p99} ms.`,
  );
  log(
    `Simulator CPU: ${summary.overhead.cpu_ms} ms; event loop ${Math.round(summary.overhead.event_loop_utilization * 100)}% busy. Runtime restarts (crashes): ${server.restarts()}.\n`,
  );
  ctx.note(`soak (${hosts} hosts, channel): errors`, summary.ops.errors);
  ctx.note(`soak (${hosts} hosts, channel): reports`, summary.ops.reports);
  ctx.note(`soak (${hosts} hosts, channel): runtime restarts`, server.restarts());
}
