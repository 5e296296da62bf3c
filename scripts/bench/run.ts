#!/usr/bin/env node
// `npm run bench`: starts the local server (wrangler dev, fresh local state, migrations applied)
// and, next to it, the floor fixture (./floor: an empty answer, one Durable Object read, one
// Durable Object write), measures the empty-request ceiling and the floors with the same load
// generator, runs every scenario in ./scenarios, and reports each figure as a ratio to the
// ceiling and to each floor measured in the same run. Loopback only; every load is bounded.
import autocannon, { type Options, type Result } from "autocannon";
import { spawnSync } from "node:child_process";
import { existsSync, readdirSync, readFileSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { pathToFileURL } from "node:url";
import { createClient, type Client } from "../../src/client/index.ts";
import { startLocalServer } from "../local-server.ts";
import { killDirectServers, startDirectFloor, startDirectServer, type DirectServer } from "./direct-server.ts";
import { hostReportBody } from "./host-report.ts";
import { PAGE_BYTES, procStats } from "./proc.ts";

const root = resolve(import.meta.dirname, "../..");
const seconds = Number(process.env.BENCH_SECONDS ?? 5);
// `npm run bench -- cost --transport http`: names pick scenarios; `--name value` options go to them.
const only: string[] = [];
const options = new Map<string, string>();
for (let i = 2; i < process.argv.length; i++) {
  const arg = process.argv[i];
  if (!arg.startsWith("--")) only.push(arg);
  else if (arg.includes("=")) options.set(arg.slice(2, arg.indexOf("=")), arg.slice(arg.indexOf("=") + 1));
  else options.set(arg.slice(2), process.argv[++i] ?? "");
}

/**
 * Where both servers (Harbormaster and the floor fixture, so the ceiling and the floors stay
 * comparable) keep their local state. `tmpfs` (the default): the local runtime syncs every storage
 * commit to its file before the object's answer leaves, and on a disk shared with other work that
 * sync costs more than a whole request; it is this machine's disk, neither Cloudflare's storage
 * (a replicated write) nor Harbormaster's code, so the default leaves it out. `disk` (`--state
 * disk` or BENCH_STATE=disk): the OS temp dir, as before, commits synced. docs/benchmarks.md
 * gives both figures.
 */
type StateKind = "tmpfs" | "disk";
const TMPFS_DIR = "/dev/shm";

/** Whether a directory is a mount point of type tmpfs (from /proc/mounts; false where unreadable). */
function isTmpfs(dir: string): boolean {
  try {
    return readFileSync("/proc/mounts", "utf8")
      .split("\n")
      .some((line) => {
        const [, mountPoint, type] = line.split(" ");
        return mountPoint === dir && type === "tmpfs";
      });
  } catch {
    return false;
  }
}

function benchState(): { kind: StateKind; dir: string } {
  const asked = options.get("state") ?? process.env.BENCH_STATE ?? "tmpfs";
  if (asked !== "tmpfs" && asked !== "disk") throw new Error(`--state takes tmpfs or disk, not '${asked}'`);
  if (asked === "disk") return { kind: "disk", dir: tmpdir() };
  if (!existsSync(TMPFS_DIR) || !isTmpfs(TMPFS_DIR))
    throw new Error(`--state tmpfs needs a tmpfs at ${TMPFS_DIR}; run with --state disk instead`);
  return { kind: "tmpfs", dir: TMPFS_DIR };
}
const state = benchState();

/**
 * wrangler dev runs, by default, a local copy of Workers Observability: every invocation (the
 * Worker's, and each Durable Object call's) streams a trace to a collector in the same runtime,
 * which stores it in a SQLite-backed object of its own. It is the dashboard of the local tool, not
 * something Cloudflare does on a request's path, and it cost a FleetLock request more than the
 * request itself (docs/benchmarks.md): off for both servers, unless the caller exports
 * X_LOCAL_OBSERVABILITY=true to measure with it.
 */
process.env.X_LOCAL_OBSERVABILITY ??= "false";
const localTraces = process.env.X_LOCAL_OBSERVABILITY !== "false";

/** What each scenario (./scenarios/*.ts, `export async function run(ctx: BenchContext)`) gets. */
export interface BenchContext {
  base: string;
  admin: string;
  /** The typed API client with the admin token; `clientFor(token)` for another token. */
  client: Client;
  clientFor(token: string | null): Client;
  /** D1 write statements so far (counted by the local server only, never on /metrics). */
  d1Writes(): Promise<number>;
  /** A local counter by its former /metrics name (harbormaster_d1_statements_total{kind="write"}). */
  metric(name: string, labels: string): Promise<number>;
  /**
   * The floors' req/s measured in this run (fixture worker: empty, Durable Object read, write, and
   * the write of a host report's body).
   */
  floors: Floors;
  /**
   * Harbormaster and the floor fixture each in one workerd with nothing in front (./direct-server.ts:
   * no wrangler dev proxy, Harbormaster's deployed entry, so no meter), started on first call; a
   * load measured there is read against their own ceiling and floors (measureFloors).
   */
  direct(): Promise<DirectBench>;
  /**
   * The floor fixture through wrangler dev, as the floors above were measured on it: its base URL
   * and the CPU time (ms) its runtime has used so far (null without /proc). Null when the run
   * started no fixture (the cost scenario alone).
   */
  floorServer: { base: string; cpuMs(): number | null } | null;
  measure(label: string, options: LoadOptions): Promise<LoadRow>;
  note(label: string, value: string | number): void;
  /**
   * Judges a figure against its goal (issue "the hot paths toward the floor": ratios to the floors
   * of the same run); every goal is printed with pass or fail after the table.
   */
  goal(label: string, measured: number, op: ">=" | "<=", bound: number): void;
  /** An option given on the command line (`--transport channel`), else undefined. */
  option(name: string): string | undefined;
  /** CPU time (ms) the local server's runtime (its workerd processes) has used so far; null without /proc. */
  serverCpuMs(): number | null;
  /** Resident memory (MB) of the local server's runtime (its workerd processes) now; null without /proc. */
  serverRssMb(): number | null;
  /**
   * A Harbormaster server no other run has used (metered, fresh local state: the bench's own if
   * nothing ran on it yet, else another one started), for a run whose counts must see no other
   * run's objects (their alarms, their ledgers' deliveries); the caller stops it (the bench stops
   * it too if it ends first).
   */
  privateServer(): Promise<PrivateServer>;
}
export interface DirectBench {
  base: string;
  admin: string;
  client: Client;
  clientFor(token: string | null): Client;
  /** Filled by measureFloors(): the fixture's floors, served direct, in req/s and in runtime CPU ms a request. */
  floors: Floors;
  floorCpuMs: Record<keyof Floors, number | null>;
  /** The direct ceiling (`/healthz`) and the direct fixture's floors, measured now. */
  measureFloors(): Promise<void>;
  /** A load after a second of the same (its warm-up), read against the direct ceiling and floors. */
  measure(label: string, options: LoadOptions): Promise<LoadRow>;
}
export interface PrivateServer {
  base: string;
  admin: string;
  serverCpuMs(): number | null;
  stop(): void;
}
export type LoadOptions = Omit<Options, "url"> & { durationSec?: number };
type Summary = ReturnType<typeof summarize>;
/** `floors`: the floors this row is read against when not the run's (a direct measurement's own). */
type LoadRow = { label: string } & Summary & { ratio: number; cpu_ms: number | null; floors?: Floors };
type Row = LoadRow | { label: string; value: string | number };
type Goal = { label: string; measured: number; op: ">=" | "<="; bound: number; pass: boolean };
export type Floors = { empty: number; read: number; write: number; body: number };

// Both servers through scripts/local-server.ts, with `--test-scheduled`: scenarios fire the
// cron's handler through /__scheduled (no timer cron runs). Harbormaster runs its local entry
// (src/local/index.ts): the deployed worker with the cost meter and the D1 taps.
const startHarbormaster = () =>
  startLocalServer({
    label: "bench",
    stateParent: state.dir,
    metered: true,
    startTimeoutMs: 60_000,
    devArgs: ["--test-scheduled", "--var", "ACCESS_LOG:off"],
  });
/** The floor fixture: another worker, without D1. */
const startFloor = () =>
  startLocalServer({
    label: "bench-floor",
    stateParent: state.dir,
    config: resolve(import.meta.dirname, "floor/wrangler.toml"),
    health: "/empty",
    startTimeoutMs: 60_000,
    devArgs: ["--test-scheduled"],
  });

/** CPU time (user + system, ms) so far and resident memory (MB) of the workerd processes under `root`, from /proc (Linux). */
function runtimeUse(root: number): { cpuMs: number; rssMb: number } | null {
  const stats = procStats();
  if (!stats) return null;
  const tick = Number(spawnSync("getconf", ["CLK_TCK"], { encoding: "utf8" }).stdout.trim()) || 100;
  const under = (pid: number): boolean => pid === root || (pid > 1 && stats.has(pid) && under(stats.get(pid)!.ppid));
  let ticks = 0;
  let pages = 0;
  for (const [pid, s] of stats) {
    if (!s.comm.startsWith("workerd") || !under(pid)) continue;
    ticks += s.ticks;
    pages += s.rssPages;
  }
  return { cpuMs: (ticks * 1000) / tick, rssMb: (pages * PAGE_BYTES) / 2 ** 20 };
}

function load(base: string, { connections = 16, durationSec = seconds, amount, requests }: LoadOptions) {
  return new Promise<Result>((res, rej) => {
    const opts: Options = { url: base, connections, requests, timeout: 30 };
    if (amount) opts.amount = amount;
    else opts.duration = durationSec;
    autocannon(opts, (err, result) => (err ? rej(err) : res(result)));
  });
}

/**
 * A load against one server, with the CPU time its runtime spent per request: a figure that moves
 * less with the machine's load than req/s does (other work slows a request, it does not make it
 * cost more CPU), so code can be compared on a shared machine. Null without /proc.
 */
async function loadOn(pid: number | (() => number | null), base: string, options: LoadOptions) {
  const cpu = typeof pid === "number" ? () => runtimeUse(pid)?.cpuMs ?? null : pid;
  const before = cpu();
  const s = summarize(await load(base, options));
  const after = cpu();
  const cpu_ms = before !== null && after !== null && s.requests > 0 ? (after - before) / s.requests : null;
  return { ...s, cpu_ms };
}

const summarize = (r: Result) => ({
  requests: r.requests.total,
  rps: r.requests.average,
  p50_ms: r.latency.p50,
  p99_ms: r.latency.p99,
  errors: r.errors + r.timeouts,
  statuses: Object.fromEntries(
    Object.entries((r as Result & { statusCodeStats?: Record<string, { count: number }> }).statusCodeStats ?? {}).map(
      ([k, v]) => [k, v.count],
    ),
  ) as Record<string, number>,
});

/**
 * The fixture's loads, each the floor its key names: `body` is a PUT of the ledger scenario's
 * unchanged report, byte for byte, stored as one value (one bare object write of the same request).
 */
const FLOOR_LOADS = [
  ["empty", { method: "GET", path: "/empty" }, "floor: fixture worker, empty answer"],
  ["read", { method: "GET", path: "/do/read" }, "floor: fixture worker, one Durable Object read"],
  ["write", { method: "GET", path: "/do/write" }, "floor: fixture worker, one Durable Object write"],
  [
    "body",
    { method: "POST", path: "/do/body", headers: { "content-type": "application/json" }, body: hostReportBody(2) },
    "floor: fixture worker, one Durable Object write of a report's body",
  ],
] as const satisfies readonly (readonly [keyof Floors, NonNullable<Options["requests"]>[number], string])[];

async function main() {
  // The cost scenario measures no load and no ratio (counts, on servers of its own): run alone,
  // it needs neither the floor fixture nor the ceiling and floors' loads, a minute or two of the
  // machine for figures it does not print.
  const loads = !only.length || only.some((name) => name !== "cost");
  const started = await Promise.allSettled([startHarbormaster(), ...(loads ? [startFloor()] : [])]);
  const servers = started.flatMap((s) => (s.status === "fulfilled" ? [s.value] : []));
  const stopAll = () => servers.forEach((s) => s.stop());
  const failed = started.find((s) => s.status === "rejected");
  if (failed) {
    stopAll();
    throw failed.reason;
  }
  const [server, floorServer] = servers;
  // The servers run in their own process groups (see local-server.ts): Ctrl-C stops them too, and
  // the direct servers' runtimes (children of this process) with their state.
  for (const sig of ["SIGINT", "SIGTERM"] as const)
    process.on(sig, () => (stopAll(), killDirectServers(), process.exit(130)));
  const rows: Row[] = [];
  const goals: Goal[] = [];
  const floors: Floors = { empty: 0, read: 0, write: 0, body: 0 };
  let direct: Promise<DirectBench> | null = null;
  const directServers: DirectServer[] = [];
  try {
    // This isolate's D1 statements, from the local entry's route: never on /metrics, which holds
    // only fleet-wide gauges.
    const local = async () => {
      const res = await fetch(`${server.url}/__local/d1-statements`);
      if (!res.ok) throw new Error(`/__local/d1-statements: ${res.status}`);
      return (await res.json()) as { reads: number; writes: number };
    };
    const d1Writes = async () => (await local()).writes;
    const metric = async (name: string, labels: string) => {
      const c = await local();
      const value = (labels.match(/"([^"]+)"/) ?? [])[1] as string;
      if (name === "harbormaster_d1_statements_total") return value === "read" ? c.reads : c.writes;
      throw new Error(`no local counter ${name}`);
    };

    const emptyRequest: Options["requests"] = [{ method: "GET", path: "/healthz" }];
    // Warm-up, so compilation and first-touch costs fall outside every measurement.
    if (loads) await load(server.url, { durationSec: 2, requests: emptyRequest });
    const ceilingBefore = loads ? await loadOn(server.pid, server.url, { requests: emptyRequest }) : null;
    let ceiling = ceilingBefore?.rps ?? 0;
    if (ceilingBefore) rows.push({ label: "empty request (ceiling, before)", ...ceilingBefore, ratio: 1 });

    // The floors: the same load generator against the fixture worker, after its own warm-up.
    for (const [, request] of floorServer ? FLOOR_LOADS : [])
      await load(floorServer.url, { durationSec: 1, requests: [request] });
    for (const [key, request, label] of floorServer ? FLOOR_LOADS : []) {
      const s = await loadOn(floorServer.pid, floorServer.url, { requests: [request] });
      floors[key] = s.rps;
      rows.push({ label, ...s, ratio: s.rps / ceiling });
    }

    /**
     * Both direct servers, then their warm-ups, ceiling and floors, back to back: what a direct
     * load is read against is measured under the same conditions as the load.
     */
    const startDirect = async (): Promise<DirectBench> => {
      const [app, fixture] = await Promise.all([
        startDirectServer({}, { stateParent: state.dir }).then((s) => (directServers.push(s), s)),
        startDirectFloor({ stateParent: state.dir }).then((s) => (directServers.push(s), s)),
      ]);
      const own: Floors = { empty: 0, read: 0, write: 0, body: 0 };
      const ownCpu: Record<keyof Floors, number | null> = { empty: null, read: null, write: null, body: null };
      let ceilingDirect = 0;
      return {
        base: app.url,
        admin: app.admin,
        client: createClient(app.url, app.admin),
        clientFor: (token) => createClient(app.url, token),
        floors: own,
        floorCpuMs: ownCpu,
        async measureFloors() {
          await load(app.url, { durationSec: 2, requests: emptyRequest });
          const c = await loadOn(app.cpuMs, app.url, { requests: emptyRequest });
          ceilingDirect = c.rps;
          rows.push({ label: "direct: empty request (ceiling)", ...c, ratio: 1, floors: own });
          for (const [, request] of FLOOR_LOADS) await load(fixture.url, { durationSec: 1, requests: [request] });
          for (const [key, request, label] of FLOOR_LOADS) {
            const s = await loadOn(fixture.cpuMs, fixture.url, { requests: [request] });
            own[key] = s.rps;
            ownCpu[key] = s.cpu_ms;
            rows.push({ label: `direct: ${label}`, ...s, ratio: s.rps / ceilingDirect, floors: own });
          }
        },
        async measure(label, options) {
          await load(app.url, { ...options, durationSec: 1 });
          const s = await loadOn(app.cpuMs, app.url, options);
          const row = { label: `direct: ${label}`, ...s, ratio: s.rps / ceilingDirect, floors: own };
          rows.push(row);
          return row;
        },
      };
    };

    let untouched = !loads;
    const ctx: BenchContext = {
      base: server.url,
      admin: server.admin,
      client: createClient(server.url, server.admin),
      clientFor: (token) => createClient(server.url, token),
      d1Writes,
      metric,
      floors,
      direct: () => (direct ??= startDirect()),
      floorServer: floorServer
        ? { base: floorServer.url, cpuMs: () => runtimeUse(floorServer.pid)?.cpuMs ?? null }
        : null,
      /** Runs a load; records rps, p50, p99 and the ratio to the ceiling. */
      async measure(label, options) {
        const s = await loadOn(server.pid, server.url, options);
        const row = { label, ...s, ratio: s.rps / ceiling };
        rows.push(row);
        return row;
      },
      /** Records a figure that is not a load (e.g. D1 writes per request). */
      note(label, value) {
        rows.push({ label, value });
      },
      goal(label, measured, op, bound) {
        const pass = Number.isFinite(measured) && (op === ">=" ? measured >= bound : measured <= bound);
        goals.push({ label, measured, op, bound, pass });
      },
      option: (name) => options.get(name),
      serverCpuMs: () => runtimeUse(server.pid)?.cpuMs ?? null,
      serverRssMb: () => runtimeUse(server.pid)?.rssMb ?? null,
      async privateServer() {
        // The bench's own server while nothing has run on it (the cost scenario alone): one start
        // (a minute on a busy machine) saved.
        if (untouched) {
          untouched = false;
          return { base: server.url, admin: server.admin, serverCpuMs: ctx.serverCpuMs, stop: () => {} };
        }
        const own = await startHarbormaster();
        servers.push(own);
        return {
          base: own.url,
          admin: own.admin,
          serverCpuMs: () => runtimeUse(own.pid)?.cpuMs ?? null,
          stop: own.stop,
        };
      },
    };

    const dir = resolve(import.meta.dirname, "scenarios");
    const files = readdirSync(dir)
      .filter((f) => f.endsWith(".ts"))
      .sort();
    for (const file of files) {
      const name = file.replace(/\.ts$/, "");
      if (only.length && !only.includes(name)) continue;
      const mod = await import(pathToFileURL(join(dir, file)).href);
      console.error(`scenario ${name}…`);
      await mod.run(ctx);
      untouched = false;
    }

    if (ceilingBefore) {
      const ceilingAfter = await loadOn(server.pid, server.url, { requests: emptyRequest });
      rows.push({
        label: "empty request (ceiling, after)",
        ...ceilingAfter,
        ratio: ceilingAfter.rps / ceilingBefore.rps,
      });
    }
  } finally {
    stopAll();
    await Promise.allSettled(directServers.map((s) => s.stop()));
  }

  console.log(
    `\nHarbormaster benchmark — 16 connections, ${seconds}s per load, ratios to the empty request measured first; ` +
      `local state ${state.kind === "tmpfs" ? `on tmpfs (${state.dir}): commits reach no disk` : `on disk (${state.dir}): every commit synced`}; ` +
      `wrangler's local traces ${localTraces ? "on" : "off"}\n`,
  );
  console.log(
    "| measurement | req/s | p50 ms | p99 ms | × ceiling | × floor empty | × floor DO read | × floor DO write | × floor write of a report's body | runtime CPU ms/req | non-2xx/errors |",
  );
  console.log("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|");
  const x = (rps: number, floor: number) => (floor ? (rps / floor).toFixed(2) : "");
  for (const r of rows) {
    if ("value" in r) {
      console.log(`| ${r.label} | ${r.value} | | | | | | | | | |`);
      continue;
    }
    const odd = Object.entries(r.statuses).filter(([k]) => !k.startsWith("2") && k !== "304");
    const f = r.floors ?? floors;
    console.log(
      `| ${r.label} | ${r.rps.toFixed(0)} | ${r.p50_ms} | ${r.p99_ms} | ${r.ratio.toFixed(2)} | ${x(r.rps, f.empty)} | ${x(
        r.rps,
        f.read,
      )} | ${x(r.rps, f.write)} | ${x(r.rps, f.body)} | ${r.cpu_ms === null ? "" : r.cpu_ms.toFixed(2)} | ${odd.length || r.errors ? `${JSON.stringify(Object.fromEntries(odd))} errors=${r.errors}` : "none"} |`,
    );
  }
  if (goals.length) {
    console.log("\n| goal | measured | target | result |\n|---|---:|---:|---|");
    for (const g of goals)
      console.log(`| ${g.label} | ${g.measured.toFixed(2)} | ${g.op} ${g.bound} | ${g.pass ? "pass" : "**fail**"} |`);
    // Goals are ratios to the first ceiling: a machine whose load moved during the run moves them
    // too, which the reader must know before believing a pass or a fail.
    const drift = rows.find((r) => r.label === "empty request (ceiling, after)");
    if (drift && "ratio" in drift && Math.abs(drift.ratio - 1) > 0.2)
      console.log(
        `\nThe ceiling measured after the scenarios is ${drift.ratio.toFixed(2)}× the one before: the load moved during the run, so these results are not a fair measurement; run again on a quieter machine.`,
      );
  }
  writeFileSync(
    resolve(root, "bench-results.json"),
    JSON.stringify({ state: state.kind, local_traces: localTraces, floors, rows, goals }, null, 2),
  );
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
