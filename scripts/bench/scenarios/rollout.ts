// Per-agent rollouts (docs/rollouts.md): N servers (1,000 and 10,000) updated at concurrency 500 by hosts
// that reconcile instantly (an in-bench stand-in speaking the host API: fetch the desired config,
// report it realized). Reports control-plane time per target and D1 statements per target, as
// ratios to the empty request measured at the start of the same run; then the same rollout direct
// (./direct-server.ts: as deployed, no wrangler dev proxy) against the empty request measured there.
// Each size runs over HTTP (hosts that long-poll) and over the host channel (the reference agent's
// default: hosts on a WebSocket their ledger holds hibernated, the desired config pushed, the
// report sent as a socket message); BENCH_ROLLOUT_TRANSPORTS=http or =channel runs one of them.
// Beside each, the wake floor (`coldObjects`): the floor fixture's one-row write on as many objects
// as there are targets, each asleep when called, on the same kind of server; an informative line.
import { spawn, spawnSync } from "node:child_process";
import { existsSync, readdirSync, readFileSync, readlinkSync, rmSync } from "node:fs";
import http from "node:http";
import { tmpdir } from "node:os";
import { join } from "node:path";
import autocannon from "autocannon";
import { tsImport } from "tsx/esm/api";
import { freePort } from "../../local-server.ts";
import { type DirectServer, startDirectFloor, startDirectServer } from "../direct-server.ts";
import { inspectorSession, type Profile as V8Profile, type ProfileNode } from "../inspector.ts";
import { procStats } from "../proc.ts";
import type { BenchContext } from "../run.ts";
import { channelHostsThatFit } from "./soak.ts";

const SIZES = (process.env.BENCH_ROLLOUT_SIZES ?? "1000,10000").split(",").map(Number);
const CONCURRENCY = 500;
const AGENT = "fw-agent";
const OLD = { image: "registry.example/fw:1.0.0", version: "1.0.0" };
const NEW = { image: "registry.example/fw:2.0.0", version: "2.0.0" };

/**
 * Whether each size is also rolled out direct (one workerd, nothing in front, the deployed entry),
 * beside the measurement through wrangler dev: BENCH_ROLLOUT_DIRECT=0 skips it.
 */
const DIRECT = process.env.BENCH_ROLLOUT_DIRECT !== "0";

type Transport = "http" | "channel";
/** The hosts' transports, each a rollout of its own per size: HTTP long polls, the host channel. */
const TRANSPORTS = (process.env.BENCH_ROLLOUT_TRANSPORTS ?? "http,channel").split(",").map((x) => {
  if (x !== "http" && x !== "channel") throw new Error(`BENCH_ROLLOUT_TRANSPORTS: "${x}" is neither http nor channel`);
  return x as Transport;
});
/** BENCH_ROLLOUT_DEV=0: the direct rollout alone (to profile it), without the judged line through wrangler dev. */
const THROUGH_DEV = process.env.BENCH_ROLLOUT_DEV !== "0";

/** Registrations and first reports in flight at once during setup (the API's own path, as an operator's script would). */
const SETUP_CONCURRENCY = Number(process.env.BENCH_ROLLOUT_SETUP_CONCURRENCY ?? 64);
/** A pause between the setup and the rollout: longer than the outbox's 10 s safety alarm. */
const SETUP_SETTLE_MS = Number(process.env.BENCH_ROLLOUT_SETTLE_MS ?? 12_000);
/**
 * Then, how long the bench waits at most for the runtime to put the fleet's objects to sleep
 * (`asleep` below). workerd evicts an object some 10-40 s after its last call.
 */
const ASLEEP_WAIT_MS = Number(process.env.BENCH_ROLLOUT_ASLEEP_WAIT_MS ?? 120_000);

type DesiredConfig = {
  generation: number;
  agents: { name: string; image: string; version: string; instance_id: string }[];
};

/** A report that realizes `cfg`: every agent running as desired. */
const inventory = (cfg: DesiredConfig) => ({
  generation: cfg.generation,
  reconciled_at: new Date().toISOString(),
  boot_id: "boot-1",
  agents: cfg.agents.map((a) => ({ ...a, state: "running" })),
  errors: [],
  assignments: { units: [], storage: [] },
});

/**
 * The stand-in hosts' HTTP client: node:http over kept-alive connections rather than fetch, whose
 * own per-request work (streams, header objects) cost this process about twice the CPU a request
 * (0.16-0.30 ms against 0.07-0.12 ms, client and a bare node server together), on the two cores
 * it shares with the runtime under test. Each host still sends what an agent sends, over HTTP:
 * the long poll with its generation in If-None-Match, then its report.
 */
const hostAgent = new http.Agent({ keepAlive: true });

/**
 * How long a stand-in host's request may take, answer included: past it the request fails and the
 * host tries again, as for a reset connection (`reconcile`). Longer than the long poll's 60 s wait,
 * after which the server answers 304.
 */
const HOST_REQUEST_TIMEOUT_MS = 90_000;

function hostRequest(
  url: string,
  method: "GET" | "PUT",
  headers: Record<string, string>,
  body?: string,
): Promise<{ status: number; text: string }> {
  return new Promise((resolve, reject) => {
    // The whole exchange, not the socket's idle time: a server that trickles bytes still ends.
    const timer = setTimeout(() => {
      reject(new Error(`${method} ${url}: no answer in ${HOST_REQUEST_TIMEOUT_MS} ms`));
      req.destroy();
    }, HOST_REQUEST_TIMEOUT_MS);
    const fail = (err: Error) => (clearTimeout(timer), reject(err));
    const req = http.request(url, { method, headers, agent: hostAgent }, (res) => {
      let text = "";
      res.setEncoding("utf8");
      res.on("data", (chunk: string) => (text += chunk));
      res.on("end", () => (clearTimeout(timer), resolve({ status: res.statusCode ?? 0, text })));
      res.on("error", fail);
    });
    req.on("error", fail);
    req.end(body);
  });
}

/**
 * CPU (ms, from /proc) of the processes a target's work runs in, apart: `wrangler dev` serves the
 * worker through a proxy worker in a second workerd (local tooling, absent from a deployment),
 * whose entry socket is the bench's base URL; the runtime is the other workerd its wrangler
 * started. Null without /proc or when the processes cannot be told apart.
 */
function processCpu(base: string): { proxy: number; runtime: number; driver: number } | null {
  const dev = devProcesses(base);
  if (!dev) return null;
  // Clock ticks of 10 ms (CLK_TCK 100 on Linux).
  const { user, system } = process.cpuUsage();
  return { proxy: dev.proxy[1].ticks * 10, runtime: dev.runtime[1].ticks * 10, driver: (user + system) / 1000 };
}

/**
 * wrangler dev's two workerd processes: its proxy (whose entry socket is the bench's base URL) and
 * the runtime its wrangler started beside it. Null without /proc or when they cannot be told apart.
 */
function devProcesses(base: string) {
  const stats = procStats();
  if (!stats) return null;
  const port = new URL(base).port;
  const cmdline = (pid: number) => {
    try {
      return readFileSync(`/proc/${pid}/cmdline`, "utf8");
    } catch {
      return "";
    }
  };
  const workerd = [...stats].filter(([, s]) => s.comm.startsWith("workerd"));
  const proxy = workerd.find(([pid]) => cmdline(pid).includes(`entry=127.0.0.1:${port}\0`));
  if (!proxy) return null;
  const runtime = workerd.filter(([pid, s]) => s.ppid === proxy[1].ppid && pid !== proxy[0]);
  return runtime.length === 1 ? { proxy, runtime: runtime[0] } : null;
}

/**
 * The objects a runtime process holds awake: each awake object keeps its SQLite database, `-wal`
 * and `-shm` open (none for one asleep). Null without /proc.
 */
function awakeObjectsOf(pid: number): number | null {
  try {
    let files = 0;
    for (const fd of readdirSync(`/proc/${pid}/fd`)) {
      try {
        if (/\.sqlite(-wal|-shm)?$/.test(readlinkSync(`/proc/${pid}/fd/${fd}`))) files++;
      } catch {
        // closed meanwhile
      }
    }
    return Math.round(files / 3);
  } catch {
    return null;
  }
}

/** The objects awake in the runtime of the `wrangler dev` serving `base`; null when it cannot be read. */
const awakeOnDev = (base: string) => () => {
  const dev = devProcesses(base);
  return dev ? awakeObjectsOf(dev.runtime[0]) : null;
};

/** The objects awake in a direct server's runtime; null when it cannot be read. */
const awakeOnDirect = (server: DirectServer) => () => {
  const files = server.openFileKinds();
  return files ? Math.round(files.sqlite / 3) : null;
};

/**
 * Waits until the runtime has put the fleet's objects to sleep, as a deployment's are when a
 * rollout reaches them: a host waits in its long poll with its ledger asleep (the Worker holds the
 * request and a hibernatable waiter, src/ledger/waits.ts), so the rollout's write wakes a ledger
 * that is not in memory. The setup has just called every ledger, and without this wait the
 * rollout found them awake or asleep by the setup's length alone: about two thirds awake at 1,000
 * targets (a 15-30 s setup), almost none at 10,000 (a 130 s setup), so the sizes measured different
 * work (docs/benchmarks.md, "A target at 10,000 and at 1,000: what grows, counted").
 * Awake: at most a few objects (the fleet's coordinator, its feed) and 1 % of the fleet.
 */
async function asleep(t: Pick<Target, "awake">, n: number, before = "the rollout") {
  const start = Date.now();
  const bound = 16 + Math.floor(n / 100);
  let awake = t.awake();
  while (awake !== null && awake > bound && Date.now() - start < ASLEEP_WAIT_MS) {
    await new Promise((res) => setTimeout(res, 1000));
    awake = t.awake();
  }
  const waitedS = (Date.now() - start) / 1000;
  console.error(
    awake === null
      ? `  objects awake before ${before}: unknown (no /proc)`
      : `  objects awake before ${before}: ${awake} (waited ${waitedS.toFixed(1)} s for them to sleep${awake > bound ? `; still over ${bound} after ${ASLEEP_WAIT_MS / 1000} s` : ""})`,
  );
  return { awake, waitedS };
}

/** A server of the floor fixture (../floor): its base URL, its runtime's CPU so far, its objects awake. */
interface FloorServer {
  base: string;
  cpuMs: () => number | null;
  awake: () => number | null;
}

/** The wake floor, per object: one call to an object the runtime had evicted, writing one row. */
interface WakeFloor {
  n: number;
  ms: number;
  cpuMs: number | null;
  /** Instances the fixture's isolate constructed in the window (its `/starts`): objects woken. */
  starts: number;
  awakeBefore: number | null;
  waitedS: number;
}

/**
 * The part of a rollout target any implementation pays: a target's ledger is asleep in a deployed
 * fleet, and the rollout's write has the runtime start it (its SQLite database opened, the first
 * statements run). The floor fixture's bare write, on N objects of their own, each created by one
 * write now; the returned function, called once the caller has let time pass (the rollout between
 * them), waits until the runtime has evicted them as the rollout waits for its fleet (`asleep`),
 * then calls each once, at the rollout's concurrency. It first waits for the rollout's server to
 * put its own objects to sleep too: the ledgers' alarms after a rollout (the outbox's safety
 * alarm, 10 s on) would otherwise run on the same cores during the floor's window.
 */
async function coldObjects(f: FloorServer, n: number): Promise<(rollout: () => number | null) => Promise<WakeFloor>> {
  const prefix = `cold-${n}-${Date.now().toString(36)}`;
  const names = Array.from({ length: n }, (_, i) => `${prefix}-${i}`);
  const write = async (name: string) => {
    const res = await hostRequest(`${f.base}/do/cold/${name}`, "GET", {});
    if (res.status !== 200) throw new Error(`/do/cold/${name}: ${res.status} ${res.text}`);
  };
  const starts = async () => {
    const res = await hostRequest(`${f.base}/starts`, "GET", {});
    return (JSON.parse(res.text) as { starts: number }).starts;
  };
  await pool(names, CONCURRENCY, write);
  return async (rollout) => {
    await asleep({ awake: rollout }, n, "the wake floor, on the rollout's server");
    const { awake, waitedS } = await asleep(f, n, "the wake floor's calls");
    // Without /proc nothing tells when they sleep: past the runtime's 10-40 s idle time.
    if (awake === null) await new Promise((res) => setTimeout(res, 60_000));
    const startsBefore = await starts();
    const cpuBefore = f.cpuMs();
    const t0 = performance.now();
    await pool(names, CONCURRENCY, write);
    const ms = (performance.now() - t0) / n;
    const cpuAfter = f.cpuMs();
    return {
      n,
      ms,
      cpuMs: cpuBefore !== null && cpuAfter !== null ? (cpuAfter - cpuBefore) / n : null,
      starts: (await starts()) - startsBefore,
      awakeBefore: awake,
      waitedS,
    };
  };
}

/** The wake floor's line, read against the empty request measured on the same kind of server. */
function noteWakeFloor(ctx: BenchContext, where: string, w: WakeFloor, empty: { ms: number; cpuMs: number | null }) {
  ctx.note(
    `floor: wake a sleeping object and write one row (${w.n} objects${where}, each called once at concurrency ${CONCURRENCY})`,
    `${w.ms.toFixed(2)} ms (${(w.ms / empty.ms).toFixed(1)}× the empty request); CPU ${w.cpuMs === null ? "n/a (no /proc)" : `${w.cpuMs.toFixed(2)} ms (${empty.cpuMs ? (w.cpuMs / empty.cpuMs).toFixed(1) : "?"}× the empty request's)`}; ` +
      `${w.starts} instances started (${(w.starts / w.n).toFixed(2)} an object), ${w.awakeBefore ?? "?"} objects awake before (waited ${w.waitedS.toFixed(1)} s)`,
  );
}

/** A rollout's target against the wake floor measured on the same kind of server: informative, not a goal. */
function noteAgainstWake(ctx: BenchContext, label: string, f: Figures, w: WakeFloor) {
  ctx.note(
    `${label}: per target × the wake floor`,
    `${(f.perTarget / w.ms).toFixed(1)}× in time; ${f.runtimeCpu !== null && w.cpuMs ? `${(f.runtimeCpu / w.cpuMs).toFixed(1)}×` : "?"} in runtime CPU`,
  );
}

async function pool<T>(items: T[], workers: number, fn: (item: T) => Promise<void>) {
  let i = 0;
  await Promise.all(
    Array.from({ length: Math.min(workers, items.length) }, async () => {
      while (i < items.length) await fn(items[i++]);
    }),
  );
}

type Host = { id: string; token: string; generation: number };

/** Long enough never to come due in a run: the fleet's heartbeats and pings are not the rollout's cost. */
const NEVER_MS = 3_600_000;

/**
 * Stand-in hosts on the host channel: the reference agent (agent/agent.ts) with the simulator's
 * in-memory driver and no latency, each on its own socket, as the soak's simulated hosts run. A
 * pushed config is installed at once and reported realized over the socket. Heartbeats and
 * keep-alive pings are pushed past the run (an idle connected fleet's cost is the soak's figure):
 * whatever the hosts send in the window is the rollout's.
 */
async function channelHosts(base: string, hosts: Host[]) {
  const [{ HostAgent }, { MemoryDriver }] = (await Promise.all([
    tsImport("../../../agent/agent.ts", import.meta.url),
    tsImport("../../../agent/memory-driver.ts", import.meta.url),
  ])) as [typeof import("../../../agent/agent.ts"), typeof import("../../../agent/memory-driver.ts")];
  const stop = new AbortController();
  const counts = { opened: 0, closed: 0, pushed: 0, reports: 0, errors: 0, httpRequests: 0, busy: 0, maxBusy: 0 };
  const runs: Promise<unknown>[] = [];
  /**
   * From a push reaching a host to its report's ack, ms: a ledger may sleep meanwhile (and be
   * started again for the report) when this exceeds its idle time.
   */
  let pushToAck: number[] = [];
  // Every HTTP request a host makes (the long poll a refused upgrade falls back to, a report
  // sent over HTTP): none is expected, and any would be counted against the channel.
  const fetchCounted: typeof fetch = (input, init) => (counts.httpRequests++, fetch(input, init));
  // Connected at the setup's pace, each host's first config realized and reported before the next.
  await pool(hosts, SETUP_CONCURRENCY, async (h) => {
    let pushedAt = 0;
    let ready!: () => void;
    let failed!: (err: Error) => void;
    const first = new Promise<void>((res, rej) => ((ready = res), (failed = rej)));
    const agent = new HostAgent({
      url: base,
      token: h.token,
      serverId: h.id,
      driver: new MemoryDriver(),
      bootId: "boot-1",
      transport: "channel",
      reportIntervalMs: NEVER_MS,
      pingMs: NEVER_MS,
      fetch: fetchCounted,
      onEvent: (e) => {
        if (e.type === "channel") counts[e.state === "open" ? "opened" : "closed"]++;
        else if (e.type === "error") counts.errors++;
        else if (e.type === "pushed" && e.message === "desired" && (e.generation ?? 0) > h.generation) {
          counts.pushed++;
          pushedAt = performance.now();
          counts.maxBusy = Math.max(counts.maxBusy, ++counts.busy);
        } else if (e.type === "reported" && e.generation >= h.generation) {
          counts.reports++;
          if (e.generation > h.generation) {
            counts.busy--;
            pushToAck.push(performance.now() - pushedAt);
          }
          h.generation = e.generation;
          ready();
        }
      },
    });
    runs.push(
      agent.run(stop.signal).then((exit) => {
        if (!stop.signal.aborted) failed(new Error(`host ${h.id} ended: ${JSON.stringify(exit)}`));
      }),
    );
    await first;
  });
  return {
    counts,
    /** Reads the counters and starts them over. */
    take() {
      const sorted = pushToAck.sort((a, b) => a - b);
      const at = (q: number) => Math.round(sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))] ?? 0);
      const taken = { ...counts, pushToAck: { p50: at(0.5), p99: at(0.99), max: at(1) } };
      pushToAck = [];
      Object.assign(counts, { opened: 0, closed: 0, pushed: 0, reports: 0, errors: 0, httpRequests: 0, maxBusy: 0 });
      return taken;
    },
    async stop() {
      stop.abort();
      await Promise.all(runs);
    },
  };
}

/** The server a rollout runs on: the bench's (wrangler dev, metered) or one measured direct. */
interface Target {
  base: string;
  admin: string;
  /** Runtime CPU (ms) so far; null without /proc. */
  cpuMs: () => number | null;
  /** The local cost meter and D1 taps (`/__local/…`): the bench's metered server only. */
  metered: boolean;
  /** CPU by process (runtime, wrangler's proxy, this bench) under `wrangler dev`. */
  split: boolean;
  /** A V8 profile of the runtime over the rollout's window (./profile-report.ts's inspector). */
  profiler?: Profiler;
  /** A native profile (perf) of the runtime's process over the same window. */
  native?: Profiler;
  /** The runtime's resident memory and awake objects, printed as the window opens and closes. */
  memory?: () => string;
  /** Objects the runtime holds awake now (their SQLite files open); null when it cannot be read. */
  awake: () => number | null;
  /** Files the runtime process holds open now (sockets included); null when it cannot be read. */
  files: () => number | null;
}

interface Figures {
  perTarget: number;
  elapsed: number;
  setupS: number;
  runtimeCpu: number | null;
  driverCpu: number;
  hostRequests: number;
  hostRetries: number;
  maxApplying: number;
  statements: number | null;
  writeStatements: number | null;
  /** Ledger instances constructed in the window (woken from storage), from the meter; null unmetered. */
  ledgerStarts: number | null;
  /** The most files the runtime held open, sampled each second: over the setup, over the rollout. */
  setupPeakFiles: number | null;
  peakFiles: number | null;
  /** Over the channel: what the hosts saw in the rollout's window. */
  channel: {
    opened: number;
    closed: number;
    pushed: number;
    reports: number;
    errors: number;
    pushToAck: { p50: number; p99: number; max: number };
  } | null;
}

/** N servers registered and reported once, then one rollout to all of them; its figures. */
async function rolloutOn(t: Target, n: number, transport: Transport): Promise<Figures> {
  let peakFiles: number | null = null;
  const sampleFiles = () => {
    const f = t.files();
    if (f !== null) peakFiles = Math.max(peakFiles ?? 0, f);
  };
  const sampler = setInterval(sampleFiles, 1000);
  let channel: Awaited<ReturnType<typeof channelHosts>> | null = null;
  try {
    return await rolloutWith(
      t,
      n,
      transport,
      sampleFiles,
      (c) => (channel = c),
      () => {
        const peak = peakFiles;
        peakFiles = null;
        return peak;
      },
    );
  } finally {
    clearInterval(sampler);
    await (channel as Awaited<ReturnType<typeof channelHosts>> | null)?.stop();
  }
}

async function rolloutWith(
  t: Target,
  n: number,
  transport: Transport,
  sampleFiles: () => void,
  onChannel: (c: Awaited<ReturnType<typeof channelHosts>>) => void,
  /** The most files the runtime held open since the last call. */
  peakFiles: () => number | null,
): Promise<Figures> {
  const auth = { Authorization: `Bearer ${t.admin}`, "Content-Type": "application/json" };
  const api = async (method: string, path: string, body?: unknown, token = t.admin) => {
    const res = await fetch(`${t.base}${path}`, {
      method,
      headers: { ...auth, Authorization: `Bearer ${token}` },
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    const text = await res.text();
    if (!res.ok) throw new Error(`${method} ${path}: ${res.status} ${text}`);
    return JSON.parse(text);
  };
  const fleet = `roll-${n}-${Date.now().toString(36)}`;
  await api("POST", "/v1/fleets", { id: fleet });
  await api("PUT", `/v1/fleets/${fleet}/channels/${AGENT}`, OLD);
  await api("PUT", `/v1/fleets/${fleet}/roles/edge`, { agents: [{ name: AGENT }] });
  const hosts: Host[] = [];
  const setupStart = Date.now();
  await pool(
    Array.from({ length: n }, (_, i) => i),
    SETUP_CONCURRENCY,
    async (i) => {
      const s = await api("POST", "/v1/servers", {
        fleet,
        hostname: `h${i}.${fleet}.bench`,
        kind: "managed",
        roles: ["edge"],
      });
      hosts.push({ id: s.id, token: s.token, generation: s.desired.generation });
    },
  );
  const registered = Date.now();
  // A fleet that runs: each host has reported its first config realized before the rollout, as
  // on a real fleet (a never-reported server's first report also activates it and starts its
  // quiet watch, which is not a rollout's cost). Over the channel, each host connects and stays.
  let channel: Awaited<ReturnType<typeof channelHosts>> | null = null;
  if (transport === "channel") {
    channel = await channelHosts(t.base, hosts);
    onChannel(channel);
  } else
    await pool(hosts, SETUP_CONCURRENCY, async (h) => {
      const cfg = await api("GET", "/v1/agent/desired", undefined, h.token);
      await api("PUT", "/v1/agent/inventory", inventory(cfg), h.token);
    });
  const setupS = (Date.now() - setupStart) / 1000;
  console.error(
    `  ${n} servers registered in ${((registered - setupStart) / 1000).toFixed(1)} s and ${transport === "channel" ? "connected on the channel, each reporting once," : "reported once"} in ${((Date.now() - registered) / 1000).toFixed(1)} s (${SETUP_CONCURRENCY} at once)`,
  );
  const byId = new Map(hosts.map((h) => [h.id, h]));
  // The setup's own deliveries and their safety alarms (the outbox's, 10 s after each first
  // report) end before the meter's window opens, so the window counts the rollout alone.
  await new Promise((res) => setTimeout(res, SETUP_SETTLE_MS));
  await asleep(t, n);
  sampleFiles();
  const setupPeakFiles = peakFiles();
  if (channel) {
    const c = channel.take();
    console.error(
      `  before the rollout, over the channel: ${c.opened} sockets opened, ${c.closed} closed, ${c.reports} reports, ${c.httpRequests} HTTP requests, ${c.errors} errors; runtime files ${t.files() ?? "?"} (${((t.files() ?? NaN) / n).toFixed(2)} a host)`,
    );
  }

  /**
   * A host that reconciles instantly: it long-polls its desired config (If-None-Match: the
   * generation it runs) and reports the new one realized the moment it appears.
   */
  let hostRequests = 0;
  let hostRetries = 0;
  /** As a real agent does: a request that fails (connection reset, 5xx) is tried again after a pause. */
  const reconcile = async (h: { id: string; token: string; generation: number }): Promise<void> => {
    for (let attempt = 1; ; attempt++) {
      try {
        return await reconcileOnce(h);
      } catch (err) {
        if (attempt >= 10) throw err;
        hostRetries++;
        await new Promise((res) => setTimeout(res, 500 * attempt));
      }
    }
  };
  const reconcileOnce = async (h: { id: string; token: string; generation: number }): Promise<void> => {
    const authorization = `Bearer ${h.token}`;
    const res = await hostRequest(`${t.base}/v1/agent/desired?wait=60`, "GET", {
      Authorization: authorization,
      "If-None-Match": `"${h.generation}"`,
    });
    hostRequests++;
    if (res.status === 304) return reconcileOnce(h);
    if (res.status !== 200) throw new Error(`desired: ${res.status} ${res.text}`);
    const cfg = JSON.parse(res.text) as DesiredConfig;
    const put = await hostRequest(
      `${t.base}/v1/agent/inventory`,
      "PUT",
      { Authorization: authorization, "Content-Type": "application/json" },
      JSON.stringify(inventory(cfg)),
    );
    hostRequests++;
    if (put.status !== 200) throw new Error(`inventory: ${put.status} ${put.text}`);
    JSON.parse(put.text);
    h.generation = cfg.generation;
  };

  // D1 statements from the local entry's taps (the deployed entry, served direct, has none).
  const local = async () => {
    const res = await fetch(`${t.base}/__local/d1-statements`);
    if (!res.ok) throw new Error(`/__local/d1-statements: ${res.status}`);
    return (await res.json()) as { reads: number; writes: number };
  };
  const d1Before = t.metered ? await local() : null;
  // The meter's window starts with the rollout: what each object class did for it (./profile).
  if (t.metered) await fetch(`${t.base}/__local/meter`, { method: "DELETE" });
  await t.profiler?.start();
  await t.native?.start();
  if (t.memory) console.error(`  as the rollout starts: ${t.memory()}`);
  // CPU the runtime (the Worker, every object, the local D1) spends on the rollout: a figure that
  // moves less with the machine's load than the wall time does, and this driver's own beside it.
  const cpuBefore = t.cpuMs();
  const splitBefore = t.split ? processCpu(t.base) : null;
  const driverBefore = process.cpuUsage();
  const t0 = Date.now();
  const r = await api("POST", "/v1/rollouts", {
    fleet,
    agent: AGENT,
    ...NEW,
    concurrency: CONCURRENCY,
    server_timeout_s: 600,
    slow_factor: 10,
  });
  // The driver follows the rollout's event log: each target that starts applying gets its host
  // going (at most `concurrency` of them are parked at once, as on a real fleet).
  let state = r.state as string;
  let change = r.change as number;
  let cursor: string | null = null;
  const running = new Set<Promise<void>>();
  let maxHosts = 0;
  let failures = 0;
  while (state === "running") {
    const page = await api("GET", `/v1/rollouts/${r.id}/events?limit=500${cursor ? `&cursor=${cursor}` : ""}`);
    for (const e of page.items as { kind: string; server_id: string | null }[]) {
      // Over the channel the ledger pushes and the host reports by itself.
      if (transport === "channel" || e.kind !== "target.applying" || !e.server_id) continue;
      const p: Promise<void> = reconcile(byId.get(e.server_id)!)
        .catch(() => void failures++)
        .finally(() => running.delete(p));
      running.add(p);
    }
    maxHosts = Math.max(maxHosts, running.size);
    // The next page starts after the last event seen (the API's cursor format: base64url of [id]).
    if (page.items.length) cursor = Buffer.from(JSON.stringify([String(page.items.at(-1).id)])).toString("base64url");
    if (page.next_cursor) continue;
    const s = await api("GET", `/v1/rollouts/${r.id}?wait=5&since=${change}`);
    state = s.state;
    change = s.change;
  }
  await Promise.all(running);
  if (failures) throw new Error(`${failures} host(s) failed`);
  const elapsed = Date.now() - t0;
  sampleFiles();
  const seen = channel?.take() ?? null;
  const cpuAfter = t.cpuMs();
  const splitAfter = t.split ? processCpu(t.base) : null;
  const driver = process.cpuUsage(driverBefore);
  if (t.memory) console.error(`  as the rollout ends: ${t.memory()}`);
  await t.native?.stop(n);
  await t.profiler?.stop(n);
  if (splitBefore && splitAfter)
    console.error(
      `  CPU per target by process: the runtime ${((splitAfter.runtime - splitBefore.runtime) / n).toFixed(2)} ms, ` +
        `wrangler's proxy ${((splitAfter.proxy - splitBefore.proxy) / n).toFixed(2)} ms, ` +
        `this bench (driver and stand-in hosts) ${((splitAfter.driver - splitBefore.driver) / n).toFixed(2)} ms`,
    );
  const runtimeCpu = cpuBefore !== null && cpuAfter !== null ? (cpuAfter - cpuBefore) / n : null;
  const driverCpu = (driver.user + driver.system) / 1000 / n;
  // The D1 rows follow from the rollout's outbox in the background; wait for them to land.
  for (let i = 0; i < 60; i++) {
    const list = await api("GET", `/v1/rollouts?fleet=${fleet}&agent=${AGENT}`);
    if (list.items[0]?.state === state && list.items[0]?.counts?.done === n) break;
    await new Promise((res) => setTimeout(res, 500));
  }
  await new Promise((res) => setTimeout(res, 2000));
  const d1After = t.metered ? await local() : null;
  const final = await api("GET", `/v1/rollouts/${r.id}`);
  if (final.state !== "succeeded" || final.counts.done !== n)
    throw new Error(`rollout ended ${final.state} ${JSON.stringify(final.counts)}`);
  let ledgerStarts: number | null = null;
  if (t.metered) {
    const reading = (await (await fetch(`${t.base}/__local/meter`)).json()) as Parameters<typeof profile>[0];
    console.error(profile(reading, n));
    ledgerStarts = reading.objects.ServerLedger?.starts ?? 0;
  }
  return {
    perTarget: elapsed / n,
    elapsed,
    setupS,
    runtimeCpu,
    driverCpu,
    hostRequests: seen ? seen.httpRequests : hostRequests,
    hostRetries,
    maxApplying: seen ? seen.maxBusy : maxHosts,
    ledgerStarts,
    setupPeakFiles,
    peakFiles: peakFiles(),
    channel: seen,
    statements: d1Before && d1After ? d1After.reads + d1After.writes - d1Before.reads - d1Before.writes : null,
    writeStatements: d1Before && d1After ? d1After.writes - d1Before.writes : null,
  };
}

/** The empty request's time (1 / req/s) and runtime CPU on a direct server, measured now. */
async function emptyRequestOn(server: DirectServer) {
  const load = (duration: number) =>
    new Promise<autocannon.Result>((res, rej) =>
      autocannon({ url: `${server.url}/healthz`, connections: 16, duration }, (err, r) => (err ? rej(err) : res(r))),
    );
  await load(1);
  const before = server.cpuMs();
  const r = await load(3);
  const after = server.cpuMs();
  const requests = r.requests.total;
  if (!requests || r.non2xx || r.errors)
    throw new Error(`direct empty request: ${r.non2xx} non-2xx, ${r.errors} errors`);
  return {
    rps: r.requests.average,
    ms: 1000 / r.requests.average,
    cpuMs: before !== null && after !== null ? (after - before) / requests : null,
  };
}

export async function run(ctx: BenchContext) {
  // The empty request's cost on this server now: the ceiling's time per request.
  const floor = await ctx.measure("rollout: empty request (floor for the rollout figures)", {
    requests: [{ method: "GET", path: "/healthz" }],
    durationSec: 3,
  });
  const floorMs = 1000 / floor.rps;

  try {
    for (const size of SIZES) {
      // The wake floor through wrangler dev, on the bench's floor fixture: its objects created
      // before this size's first rollout, woken after it.
      let wakeDev =
        THROUGH_DEV && ctx.floorServer
          ? await coldObjects({ ...ctx.floorServer, awake: awakeOnDev(ctx.floorServer.base) }, size)
          : null;
      let wakeFloor: WakeFloor | null = null;
      for (const transport of TRANSPORTS) {
        const n = fleetSize(ctx, size, transport);
        const name = (size: number, n: number) => (n < size ? ` (${size} do not fit in the open-files limit)` : "");
        if (!THROUGH_DEV) {
          await direct(ctx, n, transport);
          continue;
        }
        // Through wrangler dev and the meter: the judged line.
        const f = await rolloutOn(
          {
            base: ctx.base,
            admin: ctx.admin,
            cpuMs: ctx.serverCpuMs,
            metered: true,
            split: true,
            awake: awakeOnDev(ctx.base),
            files: () => {
              const dev = devProcesses(ctx.base);
              return dev ? openFilesOf(dev.runtime[0]) : null;
            },
          },
          n,
          transport,
        );
        const label = `rollout of ${n} targets ${over(transport)}`;
        ctx.note(
          `${label} at concurrency ${CONCURRENCY}: control-plane ms per target (× empty request ${floorMs.toFixed(2)} ms)`,
          `${f.perTarget.toFixed(2)} ms (${(f.perTarget / floorMs).toFixed(1)}×); total ${(f.elapsed / 1000).toFixed(1)} s (setup ${f.setupS.toFixed(1)} s); ${hostTraffic(f)}; at most ${f.maxApplying} hosts busy at once`,
        );
        ctx.note(
          `${label}: runtime CPU ms per target (× the empty request's ${floor.cpu_ms?.toFixed(2) ?? "?"} ms)`,
          f.runtimeCpu === null
            ? "n/a (no /proc)"
            : `${f.runtimeCpu.toFixed(2)} ms (${floor.cpu_ms ? (f.runtimeCpu / floor.cpu_ms).toFixed(1) : "?"}×); this driver ${f.driverCpu.toFixed(2)} ms`,
        );
        ctx.note(
          `${label}: D1 statements per target (the empty request costs 0)`,
          `${(f.statements! / n).toFixed(2)} (${(f.writeStatements! / n).toFixed(2)} writes)`,
        );
        ctx.note(
          `${label}: ledger instances started per target (woken from storage); open files`,
          `${f.ledgerStarts === null ? "?" : (f.ledgerStarts / n).toFixed(2)}; ${filesLine(f, n)}`,
        );
        if (wakeDev) {
          wakeFloor = await wakeDev(awakeOnDev(ctx.base));
          wakeDev = null;
          noteWakeFloor(ctx, "", wakeFloor, { ms: floorMs, cpuMs: floor.cpu_ms });
        }
        if (wakeFloor) noteAgainstWake(ctx, label, f, wakeFloor);
        ctx.goal(`${label}${name(size, n)}, ms per target × empty request`, f.perTarget / floorMs, "<=", 6);
        if (transport === "channel" && f.runtimeCpu !== null && floor.cpu_ms)
          ctx.goal(
            `${label}${name(size, n)}, runtime CPU per target × empty request's`,
            f.runtimeCpu / floor.cpu_ms,
            "<=",
            6,
          );
        console.error(
          `  rollout ${n} ${over(transport)}: ${f.perTarget.toFixed(2)} ms/target, ${(f.statements! / n).toFixed(2)} D1 statements/target`,
        );
        if (DIRECT) await direct(ctx, n, transport);
      }
    }
  } finally {
    // The hosts' kept-alive connections would hold the process open, a failed run's too.
    hostAgent.destroy();
  }
}

const over = (transport: Transport) => (transport === "channel" ? "over the channel" : "over HTTP");

/**
 * A connected host's open files in the runtime during a rollout, at the worst: its socket (two
 * descriptors: the runtime dup()s every connection it accepts) and, once the rollout has woken its
 * ledger, that ledger's SQLite database, -wal and -shm until it sleeps again (10-40 s idle). A
 * rollout that reaches every target within that time has them all awake at once: 5.3-5.4 files a
 * target measured at 200 targets, 5.0-5.1 at 1,000, in the setup (registrations and connections
 * wake the ledgers too) as in the rollout; 3.3 at 3,454, whose longer rollout let ledgers sleep
 * again. The bound holds with every ledger awake; how many are awake at once depends on the pace.
 */
const FILES_PER_CHANNEL_TARGET = 5.5;

/**
 * The fleet a size is measured with: over the channel, every host holds a socket in the runtime
 * (two descriptors) and the runtime may open only as many files as this process (ulimit -n), so
 * a size that does not fit is measured at the largest that does, and the line says so.
 */
function fleetSize(ctx: BenchContext, size: number, transport: Transport) {
  if (transport === "http") return size;
  const fit = channelHostsThatFit(FILES_PER_CHANNEL_TARGET);
  if (size <= fit.hosts) return size;
  ctx.note(
    `rollout of ${size} targets over the channel`,
    `does not fit: ${size} connected hosts need about ${fit.need(size)} open files in the runtime, which may open ${fit.limit}; measured at ${fit.hosts}, the most that fit`,
  );
  return fit.hosts;
}

function hostTraffic(f: Figures) {
  if (!f.channel) return `${f.hostRequests} host requests (${f.hostRetries} retried)`;
  const c = f.channel;
  return `${f.hostRequests} host HTTP requests; over the channel ${c.pushed} configs pushed, ${c.reports} reports, ${c.opened} sockets reopened, ${c.closed} closed, ${c.errors} host errors; from a push to its report's ack p50 ${c.pushToAck.p50} ms, p99 ${c.pushToAck.p99} ms, max ${c.pushToAck.max} ms`;
}

const filesLine = (f: Figures, n: number) => {
  const files = (x: number | null) => (x === null ? "?" : `${x} (${(x / n).toFixed(2)} a target)`);
  return `runtime files at most ${files(f.setupPeakFiles)} in the setup, ${files(f.peakFiles)} in the rollout`;
};

/** Files a process holds open (sockets included); null when /proc cannot be read. */
function openFilesOf(pid: number): number | null {
  try {
    return readdirSync(`/proc/${pid}/fd`).length;
  } catch {
    return null;
  }
}

/**
 * The same rollout as a deployment runs it: Harbormaster alone in one workerd (./direct-server.ts:
 * the deployed bundle and entry, no wrangler dev proxy, no meter), fresh state, against the empty
 * request measured on that server just before. With BENCH_ROLLOUT_PROFILE=1, a V8 profile of the
 * runtime over the rollout's window, printed by function per target.
 */
async function direct(ctx: BenchContext, n: number, transport: Transport) {
  const profiling = process.env.BENCH_ROLLOUT_PROFILE === "1";
  const inspectorPort = profiling ? await freePort() : undefined;
  const stateParent = process.env.BENCH_STATE === "disk" || !existsSync("/dev/shm") ? tmpdir() : "/dev/shm";
  const [server, fixture] = await Promise.all([
    startDirectServer({}, { stateParent, inspectorPort }),
    startDirectFloor({ stateParent }),
  ]);
  try {
    const empty = await emptyRequestOn(server);
    // Created now, woken after the rollout: their idle time is the rollout's, no wait of their own.
    const wake = await coldObjects({ base: fixture.url, cpuMs: fixture.cpuMs, awake: awakeOnDirect(fixture) }, n);
    const f = await rolloutOn(
      {
        base: server.url,
        admin: server.admin,
        cpuMs: server.cpuMs,
        metered: false,
        split: false,
        profiler: inspectorPort ? profilerAt(inspectorPort) : undefined,
        native: process.env.BENCH_ROLLOUT_PERF === "1" ? perfOf(server.pids(), stateParent) : undefined,
        awake: awakeOnDirect(server),
        files: server.openFiles,
        memory: () => {
          const files = server.openFileKinds();
          return `runtime RSS ${server.rssMb()?.toFixed(0) ?? "?"} MB, ${files ? files.sqlite / 3 : "?"} objects awake (their SQLite files open), ${files?.sockets ?? "?"} sockets`;
        },
      },
      n,
      transport,
    );
    const label = `rollout of ${n} targets ${over(transport)} direct`;
    ctx.note(
      `${label}: ms per target (× the direct empty request's ${empty.ms.toFixed(3)} ms, ${empty.rps.toFixed(0)} req/s)`,
      `${f.perTarget.toFixed(2)} ms (${(f.perTarget / empty.ms).toFixed(1)}×); total ${(f.elapsed / 1000).toFixed(1)} s (setup ${f.setupS.toFixed(1)} s); ${hostTraffic(f)}; ${filesLine(f, n)}`,
    );
    ctx.note(
      `${label}: runtime CPU ms per target (× the direct empty request's ${empty.cpuMs?.toFixed(3) ?? "?"} ms)`,
      f.runtimeCpu === null
        ? "n/a (no /proc)"
        : `${f.runtimeCpu.toFixed(2)} ms (${empty.cpuMs ? (f.runtimeCpu / empty.cpuMs).toFixed(1) : "?"}×); this driver ${f.driverCpu.toFixed(2)} ms`,
    );
    ctx.goal(`${label}, ms per target × empty request (direct)`, f.perTarget / empty.ms, "<=", 6);
    if (f.runtimeCpu !== null && empty.cpuMs)
      ctx.goal(`${label}, runtime CPU per target × empty request's (direct)`, f.runtimeCpu / empty.cpuMs, "<=", 6);
    const w = await wake(awakeOnDirect(server));
    noteWakeFloor(ctx, ", direct", w, empty);
    noteAgainstWake(ctx, label, f, w);
    console.error(
      `  rollout ${n} ${over(transport)} direct: ${f.perTarget.toFixed(2)} ms/target (empty request ${empty.ms.toFixed(3)} ms); wake floor ${w.ms.toFixed(2)} ms/object`,
    );
  } finally {
    await Promise.all([server.stop(), fixture.stop()]);
  }
}

/** Statements listed per object class in the profile, the most rows first. */
const STATEMENTS_SHOWN = Number(process.env.BENCH_ROLLOUT_STATEMENTS ?? 8);

type ClassReading = {
  requests: number;
  rpc: number;
  fetch: number;
  alarm: number;
  ws_messages: number;
  ws_events: number;
  awake_ms: number;
  /** Instances constructed in the window: objects woken from storage (evicted or never started). */
  starts: number;
  d1: { statements: number; rows_read: number; rows_written: number };
  storage: {
    rows_read: number;
    rows_written: number;
    alarms_set: number;
    statements?: { statement: string; calls: number; rows_read: number; rows_written: number }[];
  };
  methods: Record<string, { calls: number; ms: number; max_ms: number }>;
};

/** Where a target's work went, per object class and method, per target (the meter's window: the rollout). */
function profile(
  reading: { worker: { requests: number; d1: { statements: number } }; objects: Record<string, ClassReading> },
  n: number,
) {
  const f = (x: number) => (x / n).toFixed(2);
  const lines = [
    `  profile per target (${n} targets): worker requests ${f(reading.worker.requests)}, worker D1 statements ${f(reading.worker.d1.statements)}`,
  ];
  for (const [name, c] of Object.entries(reading.objects)) {
    if (!c.requests && !c.awake_ms) continue;
    lines.push(
      `  ${name}: requests ${f(c.requests)} (rpc ${f(c.rpc)}, fetch ${f(c.fetch)}, alarm ${f(c.alarm)}, socket messages ${f(c.ws_messages)}, socket events ${f(c.ws_events)}), awake ${f(c.awake_ms)} ms, ` +
        `storage rows read ${f(c.storage.rows_read)} written ${f(c.storage.rows_written)} (alarms ${f(c.storage.alarms_set)}), ` +
        `D1 statements ${f(c.d1.statements)} (rows read ${f(c.d1.rows_read)}, written ${f(c.d1.rows_written)}), ` +
        `instances started ${f(c.starts)}`,
    );
    for (const [m, u] of Object.entries(c.methods).sort((a, b) => b[1].ms - a[1].ms))
      lines.push(
        `    ${m}: ${f(u.calls)} calls, ${f(u.ms)} ms (avg ${(u.ms / u.calls).toFixed(1)} ms, max ${u.max_ms} ms)`,
      );
    // The statements that read or wrote the most rows: a regression in rows shows where it is.
    for (const s of (c.storage.statements ?? []).slice(0, STATEMENTS_SHOWN))
      lines.push(
        `    rows read ${f(s.rows_read)} written ${f(s.rows_written)} in ${f(s.calls)} calls: ${s.statement.slice(0, 140)}`,
      );
  }
  return lines.join("\n");
}

interface Profiler {
  start(): Promise<void>;
  /** Stops the profile and prints where the isolate's time went, per target. */
  stop(n: number): Promise<void>;
}

/**
 * BENCH_ROLLOUT_PERF=1: `perf record` of the direct runtime's process over the rollout's window,
 * printed by shared object and by symbol (native frames: SQLite, the kernel, V8's collector and
 * compiler, workerd itself), each as a share of the process's samples. Where the V8 profile names
 * only "(program)" or a native call's JS line, this says what the native code was.
 */
function perfOf(pids: number[], dir: string): Profiler {
  const file = join(dir, `harbormaster-perf-${process.pid}-${Date.now()}.data`);
  let child: ReturnType<typeof spawn> | null = null;
  return {
    async start() {
      child = spawn("perf", ["record", "-q", "-F", "499", "-g", "-o", file, "-p", pids.join(",")], {
        stdio: "ignore",
      });
      // No perf on this machine (or not allowed to attach): the run goes on without the profile.
      child.once("error", (err) => {
        console.error(`  perf: ${err.message}; no native profile`);
        child = null;
      });
      await new Promise((r) => setTimeout(r, 500));
    },
    async stop() {
      if (!child) return;
      const exited = new Promise((r) => child!.once("exit", r));
      child.kill("SIGINT");
      await exited;
      const report = (sort: string, extra: string[] = []) =>
        spawnSync("perf", ["report", "-i", file, "--stdio", "--no-children", "--sort", sort, ...extra], {
          encoding: "utf8",
          maxBuffer: 64 << 20,
        })
          .stdout.split("\n")
          .filter((l) => /^\s+\d+\.\d+%/.test(l))
          .slice(0, PROFILE_TOP)
          .join("\n");
      console.error(`  perf of the direct runtime, by shared object:\n${report("dso", ["-g", "none"])}`);
      console.error(`  perf of the direct runtime, by symbol:\n${report("dso,sym", ["-g", "none"])}`);
      rmSync(file, { force: true });
    },
  };
}

/** Functions printed by self and by total time (BENCH_ROLLOUT_PROFILE_TOP, default 40). */
const PROFILE_TOP = Number(process.env.BENCH_ROLLOUT_PROFILE_TOP ?? 40);
/** Functions whose self time is printed by source line. */
const PROFILE_LINES = 8;

/**
 * A V8 CPU profile of the direct runtime through its inspector (DevTools protocol, as
 * ../profile-report.ts takes one for a report): the samples' self time by function, and each
 * function's total (the samples with it anywhere on the stack, once each), in µs a target.
 */
function profilerAt(port: number): Profiler {
  let session: Awaited<ReturnType<typeof inspectorSession>> | null = null;
  return {
    async start() {
      session = await inspectorSession(port);
      await session.send("Profiler.enable");
      // 100 µs: a rollout of 1,000 runs for seconds, and a finer interval costs the isolate more.
      await session.send("Profiler.setSamplingInterval", { interval: 100 });
      await session.send("Profiler.start");
    },
    async stop(n) {
      const { profile } = (await session!.send("Profiler.stop")) as { profile: V8Profile };
      session!.close();
      console.error(profileReport(profile, n));
    },
  };
}

function profileReport(p: V8Profile, n: number) {
  const byId = new Map(p.nodes.map((node) => [node.id, node]));
  const parent = new Map<number, number>();
  for (const node of p.nodes) for (const c of node.children ?? []) parent.set(c, node.id);
  const name = (f: ProfileNode["callFrame"]) =>
    `${f.functionName || "(anonymous)"}${f.url ? ` ${f.url.replace(/^.*\//, "")}:${f.lineNumber + 1}` : ""}`;
  const idle = new Set(["(idle)", "(program)", "(root)"]);
  const self = new Map<string, number>();
  const total = new Map<string, number>();
  let busy = 0;
  for (let i = 0; i < p.samples.length; i++) {
    const dt = p.timeDeltas[i + 1] ?? 0;
    let node = byId.get(p.samples[i])!;
    if (idle.has(node.callFrame.functionName)) continue;
    busy += dt;
    const k = name(node.callFrame);
    self.set(k, (self.get(k) ?? 0) + dt);
    const seen = new Set<string>();
    for (;;) {
      const key = name(node.callFrame);
      if (!seen.has(key) && !idle.has(node.callFrame.functionName)) {
        seen.add(key);
        total.set(key, (total.get(key) ?? 0) + dt);
      }
      const up = parent.get(node.id);
      if (up === undefined) break;
      node = byId.get(up)!;
    }
  }
  const rows = (m: Map<string, number>) =>
    [...m]
      .sort((a, b) => b[1] - a[1])
      .slice(0, PROFILE_TOP)
      .map(([k, v]) => `    ${(v / n).toFixed(1).padStart(7)} µs  ${k}`)
      .join("\n");
  // The lines of the heaviest functions by self time (V8's ticks by source line, of the bundle).
  const lines = new Map<string, Map<number, number>>();
  for (const node of p.nodes)
    for (const t of node.positionTicks ?? []) {
      const k = name(node.callFrame);
      const m = lines.get(k) ?? new Map<number, number>();
      m.set(t.line, (m.get(t.line) ?? 0) + t.ticks);
      lines.set(k, m);
    }
  const heaviest = [...self]
    .sort((a, b) => b[1] - a[1])
    .slice(0, PROFILE_LINES)
    .flatMap(([k]) => {
      const m = lines.get(k);
      if (!m) return [];
      const top = [...m].sort((a, b) => b[1] - a[1]).slice(0, 4);
      return [`    ${k}: ticks by line ${top.map(([l, t]) => `${l}: ${t}`).join(", ")}`];
    });
  return [
    `  V8 profile of the direct runtime, per target: the isolate busy ${(busy / n).toFixed(1)} µs`,
    `  by self time:`,
    rows(self),
    `  by total time (the function anywhere on the stack):`,
    rows(total),
    ...heaviest,
  ].join("\n");
}
