// The Worker's CPU per host request, calibrated (`npm run bench -- cost`): the runtime's CPU over a
// window, less an idle rate measured once before the run, swung from 0 to 258k ms per host-month
// between runs on a shared machine, because a long window's idle share dwarfs the requests' own.
// Here the runtime serves bursts of one request, the steady HTTP host's (a poll carrying its
// report's tag, answered at once), back to back, with its idle rate measured just before and just
// after each burst; the CPU per request is the burst's CPU less that idle rate, over the requests.
// Three bursts, their median taken. It is an upper bound on the Worker's own: the runtime is one
// process, so the ledger's turn and the local D1 are in it too (objects are billed by duration).
import type { BenchContext } from "./run.ts";

const HOSTS = 16;
const PER_BURST = 600;
const CONCURRENCY = 8;
const IDLE_MS = 2_000;
const BURSTS = 3;

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

export interface CpuCalibration {
  /** CPU ms per request, the median of the bursts. */
  perRequestMs: number;
  /** Each burst's figure, in order. */
  bursts: number[];
  requests: string;
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
  let n = 0;
  const poll = async () => {
    const h = hosts[n++ % hosts.length];
    const res = await fetch(`${ctx.base}/v1/agent/desired`, {
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
  for (let i = 0; i < 50; i++) await poll(); // warm: every ledger awake once, code compiled
  const bursts: number[] = [];
  for (let b = 0; b < BURSTS; b++) {
    const before = await idleRate();
    const cpuFrom = ctx.serverCpuMs()!;
    const t0 = Date.now();
    let left = PER_BURST;
    await Promise.all(
      Array.from({ length: CONCURRENCY }, async () => {
        while (left-- > 0) await poll();
      }),
    );
    const ms = Date.now() - t0;
    const cpu = ctx.serverCpuMs()! - cpuFrom;
    const after = await idleRate();
    bursts.push(Math.max(0, cpu - ((before + after) / 2) * ms) / PER_BURST);
  }
  const sorted = [...bursts].sort((a, b) => a - b);
  return {
    perRequestMs: sorted[Math.floor(sorted.length / 2)],
    bursts,
    requests: `${BURSTS} bursts of ${PER_BURST} polls carrying the report's tag (GET /v1/agent/desired, 304 at once), ${CONCURRENCY} at a time, over ${HOSTS} servers`,
  };
}
