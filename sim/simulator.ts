import { existsSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { dirname } from "node:path";
import { performance } from "node:perf_hooks";
import { HostAgent, type AgentEvent } from "../agent/agent.ts";
import { FleetLockClient } from "../agent/fleetlock.ts";
import { ApiError, sleep, type FetchLike } from "../agent/http.ts";
import { MemoryDriver } from "../agent/memory-driver.ts";
import { Api, type ServerStatus } from "../cli/api.ts";
import { logNormal, percentile, pool, rng } from "./random.ts";

export interface SimOptions {
  url: string;
  token: string;
  fleet: string;
  servers: number;
  durationS: number;
  /** Agents in each server's desired config. */
  agents: number;
  /** Fraction of hosts on which installing one agent always fails. */
  installFailRate: number;
  /** Fraction of hosts on which removing an agent always fails. */
  removeFailRate: number;
  /** Fraction of hosts whose operations are slow. */
  slowRate: number;
  /** Median time of one driver operation, ms (log-normal), on normal and on slow hosts. */
  latencyMs: number;
  slowLatencyMs: number;
  /**
   * Silences and reboots fall within this many seconds from the start (default: the run's
   * duration); a caller that lets the run go on past its measurement says where faults stop.
   */
  faultsWithinS?: number;
  /** Fraction of hosts that stop talking at some point of the run. */
  silentRate: number;
  /** Fraction of hosts that take a reboot slot and reboot once during the run. */
  rebootRate: number;
  /** Fraction of reboots whose steady-state call is lost. */
  lostSteadyRate: number;
  /** Slots of the simulator's reboot group. */
  slots: number;
  group: string;
  /** When the operator issues a second generation (one agent removed, one updated); null: never. */
  changeAtS: number | null;
  /** Hosts start spread over this many seconds (a fleet does not boot in one instant). */
  rampS: number;
  /** How hosts learn of changes: the host channel (the agent's default) or the HTTP long poll only. */
  transport: "channel" | "http";
  /** Host long-poll wait (HTTP) and heartbeat (both), seconds. */
  waitS: number;
  heartbeatS: number;
  seed: number;
  /** Where the servers' tokens are kept between runs, so a later run reuses its servers. */
  stateFile: string | null;
  /** Requests in flight while setting up (registration, desired configs). */
  setupConcurrency: number;
  fetch?: FetchLike;
  onProgress?: (p: Progress) => void;
  progressEveryMs?: number;
  signal?: AbortSignal;
}

export const DEFAULTS: Omit<SimOptions, "url" | "token" | "fleet"> = {
  servers: 10,
  durationS: 30,
  agents: 3,
  installFailRate: 0,
  removeFailRate: 0,
  slowRate: 0,
  latencyMs: 5,
  slowLatencyMs: 800,
  silentRate: 0,
  rebootRate: 0,
  lostSteadyRate: 0,
  slots: 1,
  group: "sim",
  changeAtS: null,
  rampS: 1,
  transport: "channel",
  waitS: 25,
  heartbeatS: 20,
  seed: 1,
  stateFile: null,
  setupConcurrency: 16,
};

export interface HostFlags {
  failInstall: boolean;
  failRemove: boolean;
  slow: boolean;
  silentAtMs: number | null;
  rebootAtMs: number | null;
  lostSteady: boolean;
}

export interface SimHost {
  index: number;
  id: string;
  hostname: string;
  fleetlockId: string;
  token: string;
  flags: HostFlags;
  /** Every accepted report: the generation it claimed and the status the server computed. */
  reports: { generation: number; status: ServerStatus; bootId: string; at: number }[];
  /** Generations the operator (the simulator) issued to this host, in order. */
  /** `connected`: the host's channel was open when the generation was written (push latency counts only those). */
  issued: { generation: number; at: number; connected?: boolean; pushed?: boolean }[];
  /** Whether the host's channel is open now. */
  channelOpen: boolean;
  bootIds: string[];
  silent: boolean;
  reboot: { grantedAt: number | null; refusals: number; backAt: number | null; steadyState: "sent" | "lost" | null };
  exit: string | null;
}

export interface Progress {
  elapsedS: number;
  durationS: number;
  byStatus: Record<string, number>;
  ops: number;
  errors: number;
  reboots: number;
}

export interface SimSummary {
  url: string;
  fleet: string;
  servers: number;
  registered: number;
  reused: number;
  durationS: number;
  byStatus: Record<string, number>;
  ops: { polls: number; polls_changed: number; pushes: number; reports: number; fleetlock: number; total: number; errors: number };
  /** Channel sockets opened, and closed or refused (the host channel only). */
  channel: { opened: number; closed: number };
  errors_by_kind: Record<string, number>;
  /** push: from the operator's write of a generation to its host receiving it over the channel (hosts connected at the write). */
  latency_ms: { report_p50: number; report_p99: number; converge_p50: number | null; converge_p99: number | null; push_p50: number | null; push_p99: number | null };
  reboots: { planned: number; granted: number; refusals: number; back: number; steady_state_lost: number };
  group: { slots: number; samples: number; max_holders: number; over_slots: number; holders_at_end: string[] };
  /** What the simulator itself cost: its CPU time per host operation, and how busy its event loop was. */
  overhead: { cpu_us_per_op: number; cpu_ms: number; event_loop_utilization: number };
  hosts: SimHost[];
}

interface SimState {
  url: string;
  fleet: string;
  base_url?: string;
  servers: { index: number; id: string; hostname: string; fleetlock_id: string; token: string }[];
}

function loadState(file: string | null, url: string, fleet: string): SimState {
  if (file && existsSync(file)) {
    try {
      const s = JSON.parse(readFileSync(file, "utf8")) as SimState;
      if (s.url === url && s.fleet === fleet && Array.isArray(s.servers)) return s;
    } catch {
      // unreadable: start afresh
    }
  }
  return { url, fleet, servers: [] };
}

function saveState(file: string | null, state: SimState) {
  if (!file) return;
  mkdirSync(dirname(file), { recursive: true });
  // Server tokens: readable by the owner only.
  writeFileSync(file, JSON.stringify(state, null, 2), { mode: 0o600 });
}

const agentSpecs = (n: number, tag: string) =>
  Array.from({ length: n }, (_, j) => ({ name: `sim-a${j}`, image: `sim/agent-${j}:${tag}`, version: tag }));

/**
 * Plays `servers` hosts against a Harbormaster, each running the reference agent with an
 * in-memory driver, all in this one process. Registers (or reuses) its servers, issues their
 * desired configs, injects faults, and stops by itself after `durationS`.
 */
export async function runSim(o: SimOptions): Promise<SimSummary> {
  const fetchImpl = o.fetch ?? ((i, init) => fetch(i, init));
  const api = new Api(o.url, o.token, fetchImpl);
  const random = rng(o.seed);

  // The fleet, created if missing.
  try {
    await api.getFleet(o.fleet);
  } catch (err) {
    if (!(err instanceof ApiError && err.status === 404)) throw err;
    await api.createFleet({ id: o.fleet, stale_after_s: Math.max(60, o.heartbeatS * 4) });
  }

  // Servers: reused from the state file, registered for the rest.
  const state = loadState(o.stateFile, api.base, o.fleet);
  const known = new Map(state.servers.map((s) => [s.index, s]));
  let registered = 0;
  const runTag = Date.now().toString(36);
  const entries = await pool(Array.from({ length: o.servers }, (_, i) => i), o.setupConcurrency, async (i) => {
    const reuse = known.get(i);
    if (reuse) return reuse;
    let hostname = `sim-${i}.${o.fleet}.sim.test`;
    let fleetlockId = `sim-${i}`;
    let created;
    try {
      created = await api.registerServer({ fleet: o.fleet, hostname, kind: "managed", reboot_group: o.group, fleetlock_id: fleetlockId });
    } catch (err) {
      // A server of an earlier run (whose state file is gone) holds the hostname or the id.
      if (!(err instanceof ApiError && (err.code === "fleetlock_id_taken" || err.code === "hostname_taken"))) throw err;
      hostname = `sim-${i}-${runTag}.${o.fleet}.sim.test`;
      fleetlockId = `sim-${i}-${runTag}`;
      created = await api.registerServer({ fleet: o.fleet, hostname, kind: "managed", reboot_group: o.group, fleetlock_id: fleetlockId });
    }
    registered++;
    return { index: i, id: created.id, hostname, fleetlock_id: fleetlockId, token: created.token };
  });
  state.servers = [...new Map([...state.servers, ...entries].map((s) => [s.index, s])).values()].sort((a, b) => a.index - b.index);
  saveState(o.stateFile, state);

  const durationMs = o.durationS * 1000;
  const faultsMs = (o.faultsWithinS ?? o.durationS) * 1000;
  const hosts: SimHost[] = entries.map((e) => {
    const rebooting = random() < o.rebootRate;
    const silent = !rebooting && random() < o.silentRate;
    return {
      index: e.index,
      id: e.id,
      hostname: e.hostname,
      fleetlockId: e.fleetlock_id,
      token: e.token,
      flags: {
        failInstall: random() < o.installFailRate,
        failRemove: random() < o.removeFailRate,
        slow: random() < o.slowRate,
        silentAtMs: silent ? faultsMs * (0.2 + 0.4 * random()) : null,
        rebootAtMs: rebooting ? faultsMs * (0.15 + 0.35 * random()) : null,
        lostSteady: rebooting && random() < o.lostSteadyRate,
      },
      reports: [],
      issued: [],
      bootIds: [],
      silent: false,
      channelOpen: false,
      reboot: { grantedAt: null, refusals: 0, backAt: null, steadyState: null },
      exit: null,
    };
  });

  // Reboot coordination: the fleet's FleetLock key (reused when it still works) and the group.
  let baseUrl: string | null = null;
  if (hosts.some((h) => h.flags.rebootAtMs !== null)) {
    if (state.base_url) {
      const probe = await new FleetLockClient(state.base_url, { id: hosts[0].fleetlockId, group: o.group }, fetchImpl).steadyState();
      if (probe.ok) baseUrl = state.base_url;
    }
    if (!baseUrl) {
      baseUrl = (await api.rotateFleetlockKey(o.fleet)).base_url;
      state.base_url = baseUrl;
      saveState(o.stateFile, state);
    }
    await api.putGroup(o.fleet, o.group, { slots: o.slots, paused: false, windows: [] });
  }

  // The operator's first order: `agents` agents on every host, at the next generation.
  const desiredNow = new Map<string, number>();
  await pool(hosts, o.setupConcurrency, async (h) => {
    // Registered just now: generation 1. Reused: whatever its ledger holds.
    const current = known.has(h.index) ? (await api.getDesired(h.id)).generation : 1;
    const config = await api.putDesired(h.id, { generation: current + 1, agents: agentSpecs(o.agents, "v1") });
    desiredNow.set(h.id, config.generation);
    h.issued.push({ generation: config.generation, at: performance.now() });
  });

  // Counters.
  const ops = { polls: 0, polls_changed: 0, pushes: 0, reports: 0, fleetlock: 0, errors: 0 };
  const channel = { opened: 0, closed: 0 };
  const pushMs: number[] = [];
  const errorKinds = new Map<string, number>();
  const reportMs: number[] = [];
  const convergeMs: number[] = [];
  let reboots = 0;
  let lost = 0;
  const group = { samples: 0, max_holders: 0, over_slots: 0 };

  const stopAll = new AbortController();
  const onOuterAbort = () => stopAll.abort();
  o.signal?.addEventListener("abort", onOuterAbort, { once: true });
  const startedAt = performance.now();
  const elapsed = () => performance.now() - startedAt;
  const cpu0 = process.cpuUsage();
  const elu0 = performance.eventLoopUtilization();

  const onEvent = (h: SimHost, bootId: string) => (e: AgentEvent) => {
    if (e.type === "desired") {
      ops.polls++;
      if (e.changed) ops.polls_changed++;
    } else if (e.type === "pushed") {
      ops.pushes++;
      const issued = h.issued.find((x) => x.generation === e.generation);
      if (e.message !== "refresh" && issued?.connected && !issued.pushed) {
        issued.pushed = true;
        pushMs.push(performance.now() - issued.at);
      }
    } else if (e.type === "channel") {
      h.channelOpen = e.state === "open";
      if (e.state === "open") channel.opened++;
      else channel.closed++;
    } else if (e.type === "reported") {
      ops.reports++;
      reportMs.push(e.ms);
      const at = performance.now();
      h.reports.push({ generation: e.generation, status: e.accepted.status, bootId, at });
      const issued = h.issued.find((x) => x.generation === e.generation);
      if (e.accepted.status === "realized" && issued && !(issued as { done?: boolean }).done) {
        (issued as { done?: boolean }).done = true;
        convergeMs.push(at - issued.at);
      }
    } else if (e.type === "error") {
      ops.errors++;
      const err = e.error;
      const kind = err instanceof ApiError ? `${err.status} ${err.code}` : err instanceof Error ? (err.cause instanceof Error ? `${err.message}: ${err.cause.message}` : err.message) : String(err);
      errorKinds.set(kind.slice(0, 120), (errorKinds.get(kind.slice(0, 120)) ?? 0) + 1);
    }
  };

  const drivers = new Map<string, MemoryDriver>();
  const failingAgent = `sim-a${Math.min(1, o.agents - 1)}`;
  const loops: Promise<void>[] = [];

  /** One boot of a host: the agent loop until the host goes silent, reboots, or the run ends. */
  const boot = (h: SimHost, stop: AbortSignal) => {
    const bootId = `${h.fleetlockId}-boot-${h.bootIds.length}-${runTag}`;
    h.bootIds.push(bootId);
    let driver = drivers.get(h.id);
    if (!driver) {
      const hostRandom = rng(o.seed * 7919 + h.index);
      driver = new MemoryDriver({
        failInstall: (name) => h.flags.failInstall && name === failingAgent,
        failRemove: () => h.flags.failRemove,
        latencyMs: () => logNormal(hostRandom, h.flags.slow ? o.slowLatencyMs : o.latencyMs),
      });
      drivers.set(h.id, driver);
    }
    const agent = new HostAgent({
      url: o.url,
      token: h.token,
      driver,
      bootId,
      transport: o.transport,
      waitS: o.waitS,
      reportIntervalMs: o.heartbeatS * 1000,
      fetch: fetchImpl,
      onEvent: onEvent(h, bootId),
    });
    // A boot that ends (a reboot, silence) takes its channel with it.
    return agent.run(stop).finally(() => (h.channelOpen = false));
  };

  const hostLife = async (h: SimHost) => {
    // Hosts come up spread over the ramp, not as one synchronized wave.
    await sleep(random() * Math.min(o.rampS * 1000, durationMs / 2), stopAll.signal).catch(() => {});
    if (stopAll.signal.aborted) return;
    let current = new AbortController();
    const link = () => current.abort();
    stopAll.signal.addEventListener("abort", link);
    let running = boot(h, current.signal);

    if (h.flags.silentAtMs !== null) {
      await sleep(Math.max(0, h.flags.silentAtMs - elapsed()), stopAll.signal).catch(() => {});
      if (!stopAll.signal.aborted) {
        h.silent = true;
        current.abort();
      }
    } else if (h.flags.rebootAtMs !== null && baseUrl) {
      await sleep(Math.max(0, h.flags.rebootAtMs - elapsed()), stopAll.signal).catch(() => {});
      const fl = new FleetLockClient(baseUrl, { id: h.fleetlockId, group: o.group }, fetchImpl);
      while (!stopAll.signal.aborted) {
        try {
          ops.fleetlock++;
          const r = await fl.preReboot(stopAll.signal);
          if (r.ok) {
            h.reboot.grantedAt = elapsed();
            break;
          }
          h.reboot.refusals++;
        } catch {
          ops.errors++;
        }
        // Zincati retries every few minutes; the simulator is in more of a hurry.
        await sleep(300 + random() * 400, stopAll.signal).catch(() => {});
      }
      if (h.reboot.grantedAt !== null && !stopAll.signal.aborted) {
        reboots++;
        current.abort();
        h.exit = (await running).reason;
        await sleep(200 + random() * 600, stopAll.signal).catch(() => {});
        if (!stopAll.signal.aborted) {
          // Back up: Zincati says steady-state at boot, unless that call is lost.
          if (h.flags.lostSteady) {
            h.reboot.steadyState = "lost";
            lost++;
          } else {
            try {
              ops.fleetlock++;
              await fl.steadyState(stopAll.signal);
              h.reboot.steadyState = "sent";
            } catch {
              ops.errors++;
            }
          }
          current = new AbortController();
          if (stopAll.signal.aborted) current.abort();
          h.reboot.backAt = elapsed();
          running = boot(h, current.signal);
        }
      }
    }
    h.exit = (await running).reason;
    stopAll.signal.removeEventListener("abort", link);
  };
  for (const h of hosts) loops.push(hostLife(h));

  // The operator's second order, mid-run: the last agent removed, the first updated.
  const change = (async () => {
    if (o.changeAtS === null) return;
    await sleep(o.changeAtS * 1000, stopAll.signal).catch(() => {});
    if (stopAll.signal.aborted) return;
    const specs = agentSpecs(o.agents, "v1").slice(0, -1);
    if (specs.length) specs[0] = { ...specs[0], image: specs[0].image.replace(/:v1$/, ":v2"), version: "v2" };
    await pool(hosts, o.setupConcurrency, async (h) => {
      const generation = desiredNow.get(h.id)! + 1;
      h.issued.push({ generation, at: performance.now(), connected: h.channelOpen });
      await api.putDesired(h.id, { generation, agents: specs });
      desiredNow.set(h.id, generation);
    });
  })();

  // The group's holders, sampled all along: they must never exceed its slots.
  const sampler = (async () => {
    if (!baseUrl) return;
    while (!stopAll.signal.aborted) {
      try {
        const g = await api.getGroup(o.fleet, o.group);
        group.samples++;
        group.max_holders = Math.max(group.max_holders, g.holders.length);
        if (g.holders.length > g.slots) group.over_slots++;
      } catch {
        // sampling is best effort
      }
      await sleep(250, stopAll.signal).catch(() => {});
    }
  })();

  const byStatus = () => {
    const counts: Record<string, number> = {};
    for (const h of hosts) {
      const last = h.reports.at(-1);
      const k = h.silent ? "silent" : (last?.status ?? "no_report");
      counts[k] = (counts[k] ?? 0) + 1;
    }
    return counts;
  };
  const progressTimer = setInterval(
    () =>
      o.onProgress?.({
        elapsedS: elapsed() / 1000,
        durationS: o.durationS,
        byStatus: byStatus(),
        ops: ops.polls + ops.pushes + ops.reports + ops.fleetlock,
        errors: ops.errors,
        reboots,
      }),
    o.progressEveryMs ?? 1000,
  );

  const timer = setTimeout(() => stopAll.abort(), durationMs);
  await Promise.race([new Promise((r) => stopAll.signal.addEventListener("abort", r, { once: true })), Promise.all(loops)]);
  stopAll.abort();
  clearTimeout(timer);
  clearInterval(progressTimer);
  await Promise.all([...loops, change.catch(() => {}), sampler]);
  const cpu = process.cpuUsage(cpu0);
  const elu = performance.eventLoopUtilization(elu0);
  o.signal?.removeEventListener("abort", onOuterAbort);

  let holdersAtEnd: string[] = [];
  if (baseUrl) holdersAtEnd = (await api.getGroup(o.fleet, o.group)).holders.map((x) => x.id);

  const totalOps = ops.polls + ops.pushes + ops.reports + ops.fleetlock;
  const cpuMs = (cpu.user + cpu.system) / 1000;
  const sortedReports = reportMs.sort((a, b) => a - b);
  const sortedConverge = convergeMs.sort((a, b) => a - b);
  const sortedPush = pushMs.sort((a, b) => a - b);
  return {
    url: o.url,
    fleet: o.fleet,
    servers: hosts.length,
    registered,
    reused: hosts.length - registered,
    durationS: elapsed() / 1000,
    byStatus: byStatus(),
    ops: { ...ops, total: totalOps },
    channel,
    errors_by_kind: Object.fromEntries([...errorKinds].sort((a, b) => b[1] - a[1]).slice(0, 10)),
    latency_ms: {
      report_p50: round(percentile(sortedReports, 50)),
      report_p99: round(percentile(sortedReports, 99)),
      converge_p50: sortedConverge.length ? round(percentile(sortedConverge, 50)) : null,
      converge_p99: sortedConverge.length ? round(percentile(sortedConverge, 99)) : null,
      push_p50: sortedPush.length ? round(percentile(sortedPush, 50)) : null,
      push_p99: sortedPush.length ? round(percentile(sortedPush, 99)) : null,
    },
    reboots: {
      planned: hosts.filter((h) => h.flags.rebootAtMs !== null).length,
      granted: hosts.filter((h) => h.reboot.grantedAt !== null).length,
      refusals: hosts.reduce((n, h) => n + h.reboot.refusals, 0),
      back: hosts.filter((h) => h.reboot.backAt !== null).length,
      steady_state_lost: lost,
    },
    group: { slots: o.slots, ...group, holders_at_end: holdersAtEnd },
    overhead: {
      cpu_us_per_op: totalOps ? round((cpuMs * 1000) / totalOps) : 0,
      cpu_ms: round(cpuMs),
      event_loop_utilization: round(elu.utilization, 3),
    },
    hosts,
  };
}

const round = (n: number, digits = 1) => Math.round(n * 10 ** digits) / 10 ** digits;
