// Per-agent rollouts (docs/rollouts.md): N servers (1,000 and 10,000) updated at concurrency 500 by hosts
// that reconcile instantly (an in-bench stand-in speaking the host API: fetch the desired config,
// report it realized). Reports control-plane time per target and D1 statements per target, as
// ratios to the empty request measured at the start of the same run.
import { readFileSync } from "node:fs";
import http from "node:http";
import { procStats } from "../proc.ts";
import type { BenchContext } from "../run.ts";

const SIZES = (process.env.BENCH_ROLLOUT_SIZES ?? "1000,10000").split(",").map(Number);
const CONCURRENCY = 500;
const AGENT = "fw-agent";
const OLD = { image: "registry.example/fw:1.0.0", version: "1.0.0" };
const NEW = { image: "registry.example/fw:2.0.0", version: "2.0.0" };

/** Registrations and first reports in flight at once during setup (the API's own path, as an operator's script would). */
const SETUP_CONCURRENCY = Number(process.env.BENCH_ROLLOUT_SETUP_CONCURRENCY ?? 64);
/** A pause between the setup and the rollout: longer than the outbox's 10 s safety alarm. */
const SETUP_SETTLE_MS = 12_000;

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
  if (runtime.length !== 1) return null;
  // Clock ticks of 10 ms (CLK_TCK 100 on Linux).
  const { user, system } = process.cpuUsage();
  return { proxy: proxy[1].ticks * 10, runtime: runtime[0][1].ticks * 10, driver: (user + system) / 1000 };
}

async function pool<T>(items: T[], workers: number, fn: (item: T) => Promise<void>) {
  let i = 0;
  await Promise.all(
    Array.from({ length: Math.min(workers, items.length) }, async () => {
      while (i < items.length) await fn(items[i++]);
    }),
  );
}

export async function run(ctx: BenchContext) {
  const auth = { Authorization: `Bearer ${ctx.admin}`, "Content-Type": "application/json" };
  const api = async (method: string, path: string, body?: unknown, token = ctx.admin) => {
    const res = await fetch(`${ctx.base}${path}`, {
      method,
      headers: { ...auth, Authorization: `Bearer ${token}` },
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    const text = await res.text();
    if (!res.ok) throw new Error(`${method} ${path}: ${res.status} ${text}`);
    return JSON.parse(text);
  };
  // The empty request's cost on this server now: the ceiling's time per request.
  const floor = await ctx.measure("rollout: empty request (floor for the rollout figures)", {
    requests: [{ method: "GET", path: "/healthz" }],
    durationSec: 3,
  });
  const floorMs = 1000 / floor.rps;

  try {
    for (const n of SIZES) {
      const fleet = `roll-${n}-${Date.now().toString(36)}`;
      await api("POST", "/v1/fleets", { id: fleet });
      await api("PUT", `/v1/fleets/${fleet}/channels/${AGENT}`, OLD);
      await api("PUT", `/v1/fleets/${fleet}/roles/edge`, { agents: [{ name: AGENT }] });
      const hosts: { id: string; token: string; generation: number }[] = [];
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
      // quiet watch, which is not a rollout's cost).
      await pool(hosts, SETUP_CONCURRENCY, async (h) => {
        const cfg = await api("GET", "/v1/agent/desired", undefined, h.token);
        await api("PUT", "/v1/agent/inventory", inventory(cfg), h.token);
      });
      const setupS = (Date.now() - setupStart) / 1000;
      console.error(
        `  ${n} servers registered in ${((registered - setupStart) / 1000).toFixed(1)} s and reported once in ${((Date.now() - registered) / 1000).toFixed(1)} s (${SETUP_CONCURRENCY} at once)`,
      );
      const byId = new Map(hosts.map((h) => [h.id, h]));
      // The setup's own deliveries and their safety alarms (the outbox's, 10 s after each first
      // report) end before the meter's window opens, so the window counts the rollout alone.
      await new Promise((res) => setTimeout(res, SETUP_SETTLE_MS));

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
        const res = await hostRequest(`${ctx.base}/v1/agent/desired?wait=60`, "GET", {
          Authorization: authorization,
          "If-None-Match": `"${h.generation}"`,
        });
        hostRequests++;
        if (res.status === 304) return reconcileOnce(h);
        if (res.status !== 200) throw new Error(`desired: ${res.status} ${res.text}`);
        const cfg = JSON.parse(res.text) as DesiredConfig;
        const put = await hostRequest(
          `${ctx.base}/v1/agent/inventory`,
          "PUT",
          { Authorization: authorization, "Content-Type": "application/json" },
          JSON.stringify(inventory(cfg)),
        );
        hostRequests++;
        if (put.status !== 200) throw new Error(`inventory: ${put.status} ${put.text}`);
        JSON.parse(put.text);
        h.generation = cfg.generation;
      };

      const d1 = async () =>
        (await ctx.metric("harbormaster_d1_statements_total", 'kind="read"')) +
        (await ctx.metric("harbormaster_d1_statements_total", 'kind="write"'));
      const writes = () => ctx.metric("harbormaster_d1_statements_total", 'kind="write"');
      const d1Before = await d1();
      const writesBefore = await writes();
      // The meter's window starts with the rollout: what each object class did for it (./profile).
      await fetch(`${ctx.base}/__local/meter`, { method: "DELETE" });
      // CPU the runtime (the Worker, every object, the local D1) spends on the rollout: a figure that
      // moves less with the machine's load than the wall time does, and this driver's own beside it.
      const cpuBefore = ctx.serverCpuMs();
      const splitBefore = processCpu(ctx.base);
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
          if (e.kind !== "target.applying" || !e.server_id) continue;
          const p: Promise<void> = reconcile(byId.get(e.server_id)!)
            .catch(() => void failures++)
            .finally(() => running.delete(p));
          running.add(p);
        }
        maxHosts = Math.max(maxHosts, running.size);
        // The next page starts after the last event seen (the API's cursor format: base64url of [id]).
        if (page.items.length)
          cursor = Buffer.from(JSON.stringify([String(page.items.at(-1).id)])).toString("base64url");
        if (page.next_cursor) continue;
        const s = await api("GET", `/v1/rollouts/${r.id}?wait=5&since=${change}`);
        state = s.state;
        change = s.change;
      }
      await Promise.all(running);
      if (failures) throw new Error(`${failures} host(s) failed`);
      const maxApplying = maxHosts;
      const elapsed = Date.now() - t0;
      const cpuAfter = ctx.serverCpuMs();
      const splitAfter = processCpu(ctx.base);
      if (splitBefore && splitAfter)
        console.error(
          `  CPU per target by process: the runtime ${((splitAfter.runtime - splitBefore.runtime) / n).toFixed(2)} ms, ` +
            `wrangler's proxy ${((splitAfter.proxy - splitBefore.proxy) / n).toFixed(2)} ms, ` +
            `this bench (driver and stand-in hosts) ${((splitAfter.driver - splitBefore.driver) / n).toFixed(2)} ms`,
        );
      const driver = process.cpuUsage(driverBefore);
      const runtimeCpu = cpuBefore !== null && cpuAfter !== null ? (cpuAfter - cpuBefore) / n : null;
      const driverCpu = (driver.user + driver.system) / 1000 / n;
      // The D1 rows follow from the rollout's outbox in the background; wait for them to land.
      for (let i = 0; i < 60; i++) {
        const list = await api("GET", `/v1/rollouts?fleet=${fleet}&agent=${AGENT}`);
        if (list.items[0]?.state === state && list.items[0]?.counts?.done === n) break;
        await new Promise((res) => setTimeout(res, 500));
      }
      await new Promise((res) => setTimeout(res, 2000));
      const statements = (await d1()) - d1Before;
      const writeStatements = (await writes()) - writesBefore;
      const final = await api("GET", `/v1/rollouts/${r.id}`);
      if (final.state !== "succeeded" || final.counts.done !== n)
        throw new Error(`rollout ended ${final.state} ${JSON.stringify(final.counts)}`);
      const perTarget = elapsed / n;
      const reading = (await (await fetch(`${ctx.base}/__local/meter`)).json()) as Parameters<typeof profile>[0];
      console.error(profile(reading, n));
      ctx.note(
        `rollout of ${n} targets at concurrency ${CONCURRENCY}: control-plane ms per target (× empty request ${floorMs.toFixed(2)} ms)`,
        `${perTarget.toFixed(2)} ms (${(perTarget / floorMs).toFixed(1)}×); total ${(elapsed / 1000).toFixed(1)} s (setup ${setupS.toFixed(1)} s); ${hostRequests} host requests (${hostRetries} retried); at most ${maxApplying} hosts busy at once`,
      );
      ctx.note(
        `rollout of ${n} targets: runtime CPU ms per target (× the empty request's ${floor.cpu_ms?.toFixed(2) ?? "?"} ms)`,
        runtimeCpu === null
          ? "n/a (no /proc)"
          : `${runtimeCpu.toFixed(2)} ms (${floor.cpu_ms ? (runtimeCpu / floor.cpu_ms).toFixed(1) : "?"}×); this driver ${driverCpu.toFixed(2)} ms`,
      );
      ctx.note(
        `rollout of ${n} targets: D1 statements per target (the empty request costs 0)`,
        `${(statements / n).toFixed(2)} (${(writeStatements / n).toFixed(2)} writes)`,
      );
      ctx.goal(`rollout of ${n} targets, ms per target × empty request`, perTarget / floorMs, "<=", 6);
      console.error(
        `  rollout ${n}: ${perTarget.toFixed(2)} ms/target, ${(statements / n).toFixed(2)} D1 statements/target`,
      );
    }
  } finally {
    // The hosts' kept-alive connections would hold the process open, a failed run's too.
    hostAgent.destroy();
  }
}

/** Statements listed per object class in the profile, the most rows first. */
const STATEMENTS_SHOWN = Number(process.env.BENCH_ROLLOUT_STATEMENTS ?? 8);

type ClassReading = {
  requests: number;
  rpc: number;
  fetch: number;
  alarm: number;
  awake_ms: number;
  d1: { statements: number; rows_written: number };
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
      `  ${name}: requests ${f(c.requests)} (rpc ${f(c.rpc)}, fetch ${f(c.fetch)}, alarm ${f(c.alarm)}), awake ${f(c.awake_ms)} ms, ` +
        `storage rows read ${f(c.storage.rows_read)} written ${f(c.storage.rows_written)} (alarms ${f(c.storage.alarms_set)}), ` +
        `D1 statements ${f(c.d1.statements)} (rows written ${f(c.d1.rows_written)})`,
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
