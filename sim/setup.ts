// Before the hosts start: the fleet, its servers (reused from the state file, registered for the
// rest), each host's faults drawn from the seed, the reboot group and the operator's first order.
import { existsSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { dirname } from "node:path";
import { performance } from "node:perf_hooks";
import { FleetLockClient } from "../agent/fleetlock.ts";
import { ApiError, type FetchLike } from "../agent/http.ts";
import type { Api } from "../cli/api.ts";
import type { SimHost } from "./model.ts";
import type { SimOptions } from "./options.ts";
import { pool } from "./random.ts";

interface SimState {
  url: string;
  fleet: string;
  base_url?: string;
  servers: StateEntry[];
}
type StateEntry = { index: number; id: string; hostname: string; fleetlock_id: string; token: string };

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

export const agentSpecs = (n: number, tag: string) =>
  Array.from({ length: n }, (_, j) => ({ name: `sim-a${j}`, image: `sim/agent-${j}:${tag}`, version: tag }));

/** The fleet, created if missing. */
export async function ensureFleet(api: Api, o: SimOptions) {
  try {
    await api.getFleet(o.fleet);
  } catch (err) {
    if (!(err instanceof ApiError && err.status === 404)) throw err;
    await api.createFleet({ id: o.fleet, stale_after_s: Math.max(60, o.heartbeatS * 4) });
  }
}

/** The first order a server got in the task that registered it: its generation and when. */
export type FirstOrder = { generation: number; at: number };

/** Setup counters, told to `o.onSetup` at most every `o.progressEveryMs`. */
export class SetupMeter {
  registered = 0;
  ordered = 0;
  #last = 0;
  readonly #o: SimOptions;
  readonly total: number;
  constructor(o: SimOptions, total: number) {
    this.#o = o;
    this.total = total;
  }
  tell(force = false) {
    const now = performance.now();
    if (!this.#o.onSetup || (!force && now - this.#last < (this.#o.progressEveryMs ?? 1000))) return;
    this.#last = now;
    this.#o.onSetup({ registered: this.registered, ordered: this.ordered, total: this.total });
  }
}

/**
 * Servers: reused from the state file, registered for the rest. With `o.orderAtRegistration`, a
 * server registered here gets the operator's first order (`agents` agents, generation 2) in the
 * same task, while its ledger is still awake from the registration: the pass after every
 * registration (issueFirstOrder) would wake each ledger a second time (the local runtime puts an
 * idle object to sleep within seconds), a second cost per host that a large fleet's setup pays.
 */
export async function registerServers(api: Api, o: SimOptions, runTag: string, meter = new SetupMeter(o, o.servers)) {
  const state = loadState(o.stateFile, api.base, o.fleet);
  const known = new Map(state.servers.map((s) => [s.index, s]));
  const firstOrders = new Map<number, FirstOrder>();
  let registered = 0;
  const entries = await pool(
    Array.from({ length: o.servers }, (_, i) => i),
    o.setupConcurrency,
    async (i): Promise<StateEntry> => {
      const reuse = known.get(i);
      if (reuse) {
        meter.registered++;
        meter.tell();
        return reuse;
      }
      let hostname = `sim-${i}.${o.fleet}.sim.test`;
      let fleetlockId = `sim-${i}`;
      let created;
      try {
        created = await api.registerServer({
          fleet: o.fleet,
          hostname,
          kind: "managed",
          reboot_group: o.group,
          fleetlock_id: fleetlockId,
        });
      } catch (err) {
        // A server of an earlier run (whose state file is gone) holds the hostname or the id.
        if (!(err instanceof ApiError && (err.code === "fleetlock_id_taken" || err.code === "hostname_taken")))
          throw err;
        hostname = `sim-${i}-${runTag}.${o.fleet}.sim.test`;
        fleetlockId = `sim-${i}-${runTag}`;
        created = await api.registerServer({
          fleet: o.fleet,
          hostname,
          kind: "managed",
          reboot_group: o.group,
          fleetlock_id: fleetlockId,
        });
      }
      registered++;
      meter.registered++;
      meter.tell();
      const entry = { index: i, id: created.id, hostname, fleetlock_id: fleetlockId, token: created.token };
      if (!o.orderAtRegistration) return entry;
      // Registered just now: its ledger holds generation 1.
      const config = await api.putDesired(created.id, { generation: 2, agents: agentSpecs(o.agents, "v1") });
      firstOrders.set(i, { generation: config.generation, at: performance.now() });
      meter.ordered++;
      meter.tell();
      return entry;
    },
  );
  state.servers = [...new Map([...state.servers, ...entries].map((s) => [s.index, s])).values()].sort(
    (a, b) => a.index - b.index,
  );
  saveState(o.stateFile, state);
  return { state, known, entries, registered, firstOrders };
}

/** Each host with its faults, drawn from the run's seed in host order (so a seed replays a run). */
export function planHosts(entries: StateEntry[], o: SimOptions, random: () => number): SimHost[] {
  const faultsMs = (o.faultsWithinS ?? o.durationS) * 1000;
  return entries.map((e) => {
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
}

/** Reboot coordination: the fleet's FleetLock key (reused when it still works) and the group; null when no host reboots. */
export async function setUpReboots(api: Api, o: SimOptions, hosts: SimHost[], state: SimState, fetchImpl: FetchLike) {
  let baseUrl: string | null = null;
  if (!hosts.some((h) => h.flags.rebootAtMs !== null)) return baseUrl;
  if (state.base_url) {
    const probe = await new FleetLockClient(
      state.base_url,
      { id: hosts[0].fleetlockId, group: o.group },
      fetchImpl,
    ).steadyState();
    if (probe.ok) baseUrl = state.base_url;
  }
  if (!baseUrl) {
    baseUrl = (await api.rotateFleetlockKey(o.fleet)).base_url;
    state.base_url = baseUrl;
    saveState(o.stateFile, state);
  }
  await api.putGroup(o.fleet, o.group, { slots: o.slots, paused: false, windows: [] });
  return baseUrl;
}

/**
 * The operator's first order: `agents` agents on every host, at the next generation; a host that
 * got it at its registration (`o.orderAtRegistration`) keeps that one. Returns each host's desired
 * generation.
 */
export async function issueFirstOrder(
  api: Api,
  o: SimOptions,
  hosts: SimHost[],
  known: Map<number, unknown>,
  firstOrders: Map<number, FirstOrder>,
  meter = new SetupMeter(o, hosts.length),
) {
  const desiredNow = new Map<string, number>();
  await pool(hosts, o.setupConcurrency, async (h) => {
    let order = firstOrders.get(h.index);
    if (!order) {
      // Registered just now: generation 1. Reused: whatever its ledger holds.
      const current = known.has(h.index) ? (await api.getDesired(h.id)).generation : 1;
      const config = await api.putDesired(h.id, { generation: current + 1, agents: agentSpecs(o.agents, "v1") });
      order = { generation: config.generation, at: performance.now() };
      meter.ordered++;
      meter.tell();
    }
    desiredNow.set(h.id, order.generation);
    h.issued.push({ generation: order.generation, at: order.at });
  });
  meter.tell(true);
  return desiredNow;
}
