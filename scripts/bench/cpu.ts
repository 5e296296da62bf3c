// The Worker's CPU per host request, calibrated (`npm run bench -- cost`): the runtime's CPU over a
// window, less an idle rate measured once before the run, swung from 0 to 258k ms per host-month
// between runs on a shared machine, because a long window's idle share dwarfs the requests' own.
// Here the runtime serves bursts of the steady HTTP host's own request, back to back, with its idle
// rate measured just before and just after each burst; the CPU per request is the burst's CPU less
// that idle rate, over the requests. The request is the long poll as a steady host sends it
// (`?wait=` with its generation current and its report's tag): the ledger takes the heartbeat and
// hands the Worker a waiter socket, the Worker holds it until the wait runs out, closes it (which
// wakes the ledger once more) and answers 304. The wait here is 1 s, not the host's 60: what it
// costs in CPU is the same whatever its length (a timer), and a second keeps a burst short. Each
// host has one poll in flight at a time, as a real host does. Three bursts, their median taken;
// the same for a poll answered at once (no `wait`), shown beside it. It is an upper bound on the
// Worker's own: the runtime is one process, so the ledger's turns and the local D1 are in it too
// (objects are billed by duration).
import type { BenchContext } from "./run.ts";

const HOSTS = 64;
const PER_BURST = 640;
/** The long poll's wait, s: see above. */
const WAIT_S = 1;
const IDLE_MS = 2_000;
const BURSTS = 3;

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

export interface CpuCalibration {
  /** CPU ms per request, the median of the bursts. */
  perRequestMs: number;
  /** Each burst's figure, in order. */
  bursts: number[];
  requests: string;
  /** The same for a poll answered at once (no wait): what the calibration measured before. */
  immediate: { perRequestMs: number; bursts: number[] };
}

export async function calibrateCpu(ctx: BenchContext, fleet: string): Promise<CpuCalibration | null> {
  if (ctx.serverCpuMs() === null) return null;
  const admin = { authorization: `Bearer ${ctx.admin}`, "content-type": "application/json" };
  const call = async (method: string, path: string, headers: Record<string, string>, body?: unknown) => {
    const res = await fetch(`${ctx.base}${path}`, {
      method,
      headers,
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    const text = await res.text();
    if (res.status >= 400) throw new Error(`${method} ${path}: ${res.status} ${text}`);
    return text ? (JSON.parse(text) as Record<string, unknown>) : {};
  };
  await call("POST", "/v1/fleets", admin, { id: fleet });
  const hosts: { token: string; tag: string }[] = [];
  for (let i = 0; i < HOSTS; i++) {
    const s = await call("POST", "/v1/servers", admin, { fleet, hostname: `cpu-${i}.bench`, kind: "managed" });
    const token = s.token as string;
    const r = await call(
      "PUT",
      "/v1/agent/inventory",
      { authorization: `Bearer ${token}`, "content-type": "application/json" },
      {
        generation: 1,
        reconciled_at: new Date().toISOString(),
        boot_id: "boot-1",
        agents: [],
        errors: [],
        assignments: { units: [], storage: [] },
      },
    );
    hosts.push({ token, tag: r.report_tag as string });
  }
  const poll = async (h: { token: string; tag: string }, waitS: number) => {
    const res = await fetch(`${ctx.base}/v1/agent/desired${waitS ? `?wait=${waitS}` : ""}`, {
      headers: { authorization: `Bearer ${h.token}`, "if-none-match": '"1"', "x-report-tag": h.tag },
    });
    await res.arrayBuffer();
    if (res.status !== 304) throw new Error(`poll: ${res.status}`);
  };
  const idleRate = async () => {
    const from = ctx.serverCpuMs()!;
    await sleep(IDLE_MS);
    return (ctx.serverCpuMs()! - from) / IDLE_MS;
  };
  // Warm: every ledger awake once, the code compiled, both paths taken.
  await Promise.all(hosts.map((h) => poll(h, 0)));
  await Promise.all(hosts.map((h) => poll(h, WAIT_S)));
  /** Bursts of PER_BURST polls, each host polling again as soon as its last is answered. */
  const measureBursts = async (waitS: number) => {
    const bursts: number[] = [];
    for (let b = 0; b < BURSTS; b++) {
      const before = await idleRate();
      const cpuFrom = ctx.serverCpuMs()!;
      const t0 = Date.now();
      let left = PER_BURST;
      await Promise.all(
        hosts.map(async (h) => {
          while (left-- > 0) await poll(h, waitS);
        }),
      );
      const ms = Date.now() - t0;
      const cpu = ctx.serverCpuMs()! - cpuFrom;
      const after = await idleRate();
      bursts.push(Math.max(0, cpu - ((before + after) / 2) * ms) / PER_BURST);
    }
    return { perRequestMs: median(bursts), bursts };
  };
  const longPoll = await measureBursts(WAIT_S);
  const immediate = await measureBursts(0);
  return {
    ...longPoll,
    immediate,
    requests: `${BURSTS} bursts of ${PER_BURST} long polls as a steady host sends them (GET /v1/agent/desired?wait=${WAIT_S}, generation current, X-Report-Tag: a waiter socket held until the wait runs out, then 304), one at a time per server over ${HOSTS} servers`,
  };
}

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
