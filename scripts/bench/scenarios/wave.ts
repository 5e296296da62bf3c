// A reboot wave: HOSTS hosts each need one reboot through one group of SLOTS slots. Each plays
// Zincati's loop with time compressed (BENCH_WAVE_COMPRESSION, default 30×): a pre-reboot at a
// random phase of its tick; refused, it asks again one tick later; granted, it "reboots" for
// REBOOT_MS and reports steady state. Zincati's tick is 300 s and a reboot ~90 s, so 10 s and 3 s
// at 30×. With the queue on, the group lets a pre-reboot wait up to queue_wait_s, compressed the
// same: the former maximum (600 s) and today's (MAX_QUEUE_WAIT_S, 1740 s), the latter also with
// health gates configured (all open), to show what evaluating them costs.
// Why 30× and not the 150× this ran at before: compression shortens the reboot but not the
// requests, so the hand-over (a steady-state request in, the parked host's grant out: about one
// request's latency, which is what the wave adds to its bound) weighs 150 times more against a
// reboot than it does for real. At 150× a reboot is 0.6 s, and on a loaded machine one request
// takes 100–300 ms: the ratio then measures the machine's load (1.34–1.42× in loaded rounds), not
// the coordinator. At 30× the same latency is a twentieth of a 3 s reboot or less.
// Reported: wall time as a ratio to the bound ⌈HOSTS/SLOTS⌉ × REBOOT_MS (slots never idle),
// pre-reboot calls per host, and the most holders ever seen, sampled through the operator API.
// Each setting runs ROUNDS times (BENCH_WAVE_SETTINGS picks settings: off, former, max, gates).
// Loopback only; the wave stops by itself (every host done, or WAVE_LIMIT_MS).
import { readFileSync } from "node:fs";
import { MAX_QUEUE_WAIT_S } from "../../../src/domain/limits.ts";
import type { BenchContext } from "../run.ts";

const HOSTS = Number(process.env.BENCH_WAVE_HOSTS ?? 200);
const SLOTS = Number(process.env.BENCH_WAVE_SLOTS ?? 10);
/** Named (`npm run bench -- wave`): every setting, three rounds (about 15 minutes); else one round at today's maximum. */
const NAMED = process.argv.slice(2).includes("wave");
const ROUNDS = Number(process.env.BENCH_WAVE_ROUNDS ?? (NAMED ? 3 : 1));
const COMPRESSION = Number(process.env.BENCH_WAVE_COMPRESSION ?? 30);
const SETTINGS = (process.env.BENCH_WAVE_SETTINGS ?? (NAMED ? "off,former,max,gates" : "max")).split(",");
const TICK_MS = Math.round(300_000 / COMPRESSION);
const REBOOT_MS = Math.round(90_000 / COMPRESSION);
/** The former maximum, 600 s, and today's, compressed like the ticks (whole seconds, as the API takes). */
const OLD_MAX_WAIT_S = Math.floor(600 / COMPRESSION);
const MAX_WAIT_S = Math.floor(MAX_QUEUE_WAIT_S / COMPRESSION);
/** Health gates that stay open through the wave (unknown ids: no server is failed, stale or rebooted). */
const OPEN_GATES = { fleet_health: { max_unhealthy_percent: 50 }, rollouts: true, max_rebooted_unhealthy: 1000 };
const SAMPLE_MS = 100;
/** Ten times the bound: a wave that takes longer is broken, not slow. */
const WAVE_LIMIT_MS = 10 * Math.ceil(HOSTS / SLOTS) * REBOOT_MS;

/** The machine's load average as `uptime` gives it (Linux), quoted with every round: the figures depend on it. */
function loadAverage() {
  try {
    return readFileSync("/proc/loadavg", "utf8").split(" ").slice(0, 3).join(" / ");
  } catch {
    return "n/a";
  }
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

async function setup(ctx: BenchContext, queueWaitS: number, gates: boolean) {
  const fleet = `wave-${queueWaitS ? "q" : "p"}-${Date.now().toString(36)}`;
  // Unknown ids allowed: the wave measures the coordinator, not 200 registrations.
  const f = await ctx.client.v1.fleets.$post({ json: { id: fleet, allow_unknown_ids: true } });
  if (f.status !== 201) throw new Error(`fleet: ${f.status} ${await f.text()}`);
  const k = await ctx.client.v1.fleets[":fleet"]["fleetlock-key"].$post({ param: { fleet } });
  if (k.status !== 201) throw new Error(`key: ${k.status} ${await k.text()}`);
  const g = await ctx.client.v1.fleets[":fleet"]["reboot-groups"][":group"].$put({
    param: { fleet, group: "default" },
    json: { slots: SLOTS, queue_wait_s: queueWaitS },
  });
  if (g.status !== 200) throw new Error(`group: ${g.status} ${await g.text()}`);
  if (gates) {
    const put = await ctx.client.v1.fleets[":fleet"].gates.$put({ param: { fleet }, json: OPEN_GATES });
    if (put.status !== 200) throw new Error(`gates: ${put.status} ${await put.text()}`);
  }
  return { fleet, url: `${ctx.base}${new URL((await k.json()).base_url).pathname}` };
}

/** The operator's view of the group: holders and parked hosts. */
async function groupView(ctx: BenchContext, fleet: string) {
  const g = await ctx.client.v1.fleets[":fleet"]["reboot-groups"][":group"].$get({
    param: { fleet, group: "default" },
  });
  if (g.status !== 200) return null;
  return (await g.json()) as { holders: unknown[]; queue: unknown[] };
}

function fleetlock(url: string, op: "pre-reboot" | "steady-state", id: string) {
  return fetch(`${url}v1/${op}`, {
    method: "POST",
    headers: { "fleet-lock-protocol": "true" },
    body: JSON.stringify({ client_params: { id, group: "default" } }, null, 2),
  }).then(async (r) => {
    await r.arrayBuffer();
    return r.status;
  });
}

async function wave(ctx: BenchContext, queueWaitS: number, gates = false) {
  const { fleet, url } = await setup(ctx, queueWaitS, gates);
  // Warm the coordinator and the FleetLock path, outside the measurement.
  for (let i = 0; i < 20; i++) {
    await fleetlock(url, "pre-reboot", "warm");
    await fleetlock(url, "steady-state", "warm");
  }
  const calls = new Array(HOSTS).fill(0);
  let maxHolders = 0;
  let maxQueued = 0;
  let samples = 0;
  let running = true;
  const deadline = Date.now() + WAVE_LIMIT_MS;
  const sampler = (async () => {
    while (running) {
      const g = await groupView(ctx, fleet);
      if (g) {
        samples++;
        maxHolders = Math.max(maxHolders, g.holders.length);
        maxQueued = Math.max(maxQueued, g.queue.length);
      }
      await sleep(SAMPLE_MS);
    }
  })();

  const start = Date.now();
  const host = async (i: number) => {
    const id = `wave-${i}`;
    await sleep(Math.random() * TICK_MS);
    for (;;) {
      if (Date.now() > deadline) throw new Error(`${id}: the wave did not finish within ${WAVE_LIMIT_MS} ms`);
      calls[i]++;
      if ((await fleetlock(url, "pre-reboot", id)) === 200) break;
      await sleep(TICK_MS);
    }
    await sleep(REBOOT_MS);
    // Back up: steady state, retried at the next tick until it is acknowledged.
    while ((await fleetlock(url, "steady-state", id)) !== 200) {
      if (Date.now() > deadline) throw new Error(`${id}: steady-state kept failing`);
      await sleep(TICK_MS);
    }
  };
  try {
    await Promise.all(Array.from({ length: HOSTS }, (_, i) => host(i)));
  } finally {
    running = false;
    await sampler;
  }
  const wallMs = Date.now() - start;
  const bound = Math.ceil(HOSTS / SLOTS) * REBOOT_MS;
  const after = await groupView(ctx, fleet);
  return {
    wallMs,
    ratio: wallMs / bound,
    callsPerHost: calls.reduce((a, b) => a + b, 0) / HOSTS,
    maxCalls: Math.max(...calls),
    maxHolders,
    maxQueued,
    samples,
    left: after ? after.holders.length : -1,
  };
}

export async function run(ctx: BenchContext) {
  const bound = Math.ceil(HOSTS / SLOTS) * REBOOT_MS;
  const runs: [string, string, number, boolean][] = [
    ["off", "queue off (409 at once)", 0, false],
    ["former", `queue_wait_s ${OLD_MAX_WAIT_S} (the former maximum, 600 s compressed)`, OLD_MAX_WAIT_S, false],
    ["max", `queue_wait_s ${MAX_WAIT_S} (today's maximum, ${MAX_QUEUE_WAIT_S} s compressed)`, MAX_WAIT_S, false],
    ["gates", `queue_wait_s ${MAX_WAIT_S} with health gates configured, all open`, MAX_WAIT_S, true],
  ];
  for (const name of SETTINGS)
    if (!runs.some(([n]) => n === name))
      throw new Error(`BENCH_WAVE_SETTINGS: ${name}? known are ${runs.map(([n]) => n).join(", ")}`);
  for (const [name, label, wait, gates] of runs) {
    if (!SETTINGS.includes(name)) continue;
    const results: (Awaited<ReturnType<typeof wave>> & { load: string })[] = [];
    for (let i = 0; i < ROUNDS; i++) {
      const r = { ...(await wave(ctx, wait, gates)), load: loadAverage() };
      if (r.maxHolders > SLOTS) throw new Error(`over-grant: ${r.maxHolders} holders seen for ${SLOTS} slots`);
      if (r.left !== 0) throw new Error(`${r.left} holder(s) left after the wave`);
      results.push(r);
    }
    const prefix = `wave ${HOSTS} hosts, ${SLOTS} slots, ${COMPRESSION}× (tick ${TICK_MS} ms, reboot ${REBOOT_MS} ms), ${label}`;
    const each = (f: (r: (typeof results)[number]) => string) => results.map(f).join(", ");
    ctx.note(
      `${prefix}: wall time / bound (${(bound / 1000).toFixed(1)} s), each round`,
      each((r) => `${r.ratio.toFixed(2)} (${(r.wallMs / 1000).toFixed(1)} s)`),
    );
    ctx.note(
      `${prefix}: the machine's load average (1 / 5 / 15 min) at each round's end`,
      each((r) => r.load),
    );
    ctx.note(
      `${prefix}: pre-reboot calls per host (mean / max), each round`,
      each((r) => `${r.callsPerHost.toFixed(2)} / ${r.maxCalls}`),
    );
    ctx.note(
      `${prefix}: most holders seen (slots ${SLOTS}), each round`,
      each((r) => String(r.maxHolders)),
    );
    if (wait)
      ctx.note(
        `${prefix}: most hosts seen parked, each round`,
        each((r) => String(r.maxQueued)),
      );
  }
}
