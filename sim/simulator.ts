// The fleet simulator: many hosts, each the reference agent with an in-memory driver, in one
// process, against a Harbormaster. This module runs one simulation; beside it: its options
// (./options.ts), what it keeps and reports (./model.ts), the setup before the hosts start
// (./setup.ts), one host's life (./host-life.ts) and the counters (./tally.ts).
import { performance } from "node:perf_hooks";
import { ApiError, sleep } from "../agent/http.ts";
import { Api } from "../cli/api.ts";
import { hostLives } from "./host-life.ts";
import type { SimHost, SimSummary } from "./model.ts";
import type { SimOptions } from "./options.ts";
import { pool, rng } from "./random.ts";
import {
  agentSpecs,
  ensureFleet,
  issueFirstOrder,
  planHosts,
  registerServers,
  SetupMeter,
  setUpReboots,
} from "./setup.ts";
import { byStatus, round, Tally } from "./tally.ts";

export { DEFAULTS, type SimOptions } from "./options.ts";
export type { SimHost, SimSummary } from "./model.ts";

/**
 * Plays `servers` hosts against a Harbormaster, each running the reference agent with an
 * in-memory driver, all in this one process. Registers (or reuses) its servers, issues their
 * desired configs, injects faults, and stops by itself after `durationS`.
 */
export async function runSim(o: SimOptions): Promise<SimSummary> {
  const fetchImpl = o.fetch ?? ((i, init) => fetch(i, init));
  const api = new Api(o.url, o.token, fetchImpl);
  const random = rng(o.seed);

  await ensureFleet(api, o);
  const runTag = Date.now().toString(36);
  const meter = new SetupMeter(o, o.servers);
  const { state, known, entries, registered, firstOrders } = await registerServers(api, o, runTag, meter);
  const durationMs = o.durationS * 1000;
  const hosts = planHosts(entries, o, random);
  const baseUrl = await setUpReboots(api, o, hosts, state, fetchImpl);
  const desiredNow = await issueFirstOrder(api, o, hosts, known, firstOrders, meter);

  const tally = new Tally();
  const stopAll = new AbortController();
  const onOuterAbort = () => stopAll.abort();
  o.signal?.addEventListener("abort", onOuterAbort, { once: true });
  const startedAt = performance.now();
  const elapsed = () => performance.now() - startedAt;
  const cpu0 = process.cpuUsage();
  const elu0 = performance.eventLoopUtilization();

  const hostLife = hostLives({ o, fetchImpl, random, runTag, baseUrl, tally, stopAll, elapsed, durationMs });
  const loops: Promise<void>[] = [];
  for (const h of hosts) loops.push(hostLife(h));
  // Handled here, not only when awaited at the end: a rejection meanwhile would end the process.
  const change = secondOrder(api, o, hosts, desiredNow, stopAll.signal).catch((err) =>
    console.error(`sim: the operator's second order failed: ${err}`),
  );
  const sampler = sampleGroup(api, o, baseUrl, tally, stopAll.signal);

  const progressTimer = setInterval(
    () =>
      o.onProgress?.({
        elapsedS: elapsed() / 1000,
        durationS: o.durationS,
        byStatus: byStatus(hosts),
        ops: tally.opsTotal(),
        errors: tally.ops.errors,
        reboots: tally.reboots,
      }),
    o.progressEveryMs ?? 1000,
  );

  const timer = setTimeout(() => stopAll.abort(), durationMs);
  await Promise.race([
    new Promise((r) => stopAll.signal.addEventListener("abort", r, { once: true })),
    Promise.all(loops),
  ]);
  stopAll.abort();
  clearTimeout(timer);
  clearInterval(progressTimer);
  await Promise.all([...loops, change, sampler]);
  const cpu = process.cpuUsage(cpu0);
  const elu = performance.eventLoopUtilization(elu0);
  o.signal?.removeEventListener("abort", onOuterAbort);

  let holdersAtEnd: string[] = [];
  if (baseUrl) holdersAtEnd = (await api.getGroup(o.fleet, o.group)).holders.map((x) => x.id);

  const totalOps = tally.opsTotal();
  const cpuMs = (cpu.user + cpu.system) / 1000;
  return {
    url: o.url,
    fleet: o.fleet,
    servers: hosts.length,
    registered,
    reused: hosts.length - registered,
    durationS: elapsed() / 1000,
    byStatus: byStatus(hosts),
    ops: { ...tally.ops, total: totalOps },
    channel: tally.channel,
    errors_by_kind: tally.errorsByKind(),
    latency_ms: tally.latency(),
    reboots: {
      planned: hosts.filter((h) => h.flags.rebootAtMs !== null).length,
      granted: hosts.filter((h) => h.reboot.grantedAt !== null).length,
      refusals: hosts.reduce((n, h) => n + h.reboot.refusals, 0),
      back: hosts.filter((h) => h.reboot.backAt !== null).length,
      steady_state_lost: tally.lost,
    },
    group: { slots: o.slots, ...tally.group, holders_at_end: holdersAtEnd },
    overhead: {
      cpu_us_per_op: totalOps ? round((cpuMs * 1000) / totalOps) : 0,
      cpu_ms: round(cpuMs),
      event_loop_utilization: round(elu.utilization, 3),
    },
    hosts,
  };
}

/** The operator's second order, mid-run: the last agent removed, the first updated. */
async function secondOrder(
  api: Api,
  o: SimOptions,
  hosts: SimHost[],
  desiredNow: Map<string, number>,
  stop: AbortSignal,
) {
  if (o.changeAtS === null) return;
  await sleep(o.changeAtS * 1000, stop).catch(() => {});
  if (stop.aborted) return;
  const specs = agentSpecs(o.agents, "v1").slice(0, -1);
  if (specs.length) specs[0] = { ...specs[0], image: specs[0].image.replace(/:v1$/, ":v2"), version: "v2" };
  await pool(hosts, o.setupConcurrency, async (h) => {
    const generation = desiredNow.get(h.id)! + 1;
    h.issued.push({ generation, at: performance.now(), connected: h.channelOpen });
    // A dropped connection (the local server under 10,000 hosts) is retried: the same generation
    // with the same agents is an idempotent success, so a write that did land is not doubled.
    for (let attempt = 1; ; attempt++) {
      try {
        await api.putDesired(h.id, { generation, agents: specs });
        break;
      } catch (err) {
        if (err instanceof ApiError || attempt === 5 || stop.aborted) throw err;
        await sleep(250 * attempt, stop).catch(() => {});
      }
    }
    desiredNow.set(h.id, generation);
  });
}

/** The group's holders, sampled all along: they must never exceed its slots. */
async function sampleGroup(api: Api, o: SimOptions, baseUrl: string | null, tally: Tally, stop: AbortSignal) {
  if (!baseUrl) return;
  while (!stop.aborted) {
    try {
      const g = await api.getGroup(o.fleet, o.group);
      tally.group.samples++;
      tally.group.max_holders = Math.max(tally.group.max_holders, g.holders.length);
      if (g.holders.length > g.slots) tally.group.over_slots++;
    } catch {
      // sampling is best effort
    }
    await sleep(250, stop).catch(() => {});
  }
}
