// The operator console's pages at fleet scale (issue goal: every page ≤ 300 ms at 10,000 servers).
// Seeds a fleet of N servers (BENCH_CONSOLE_N, default 10000) registered through the API as the
// status scenario does, each host reporting once — realized, but 1% failed and 1% drifted (a fleet
// is mostly realized, and that is what a scan for the few others would have to wade through) —
// a reboot group with two holders and a queue, a
// running rollout, the audit entries all that leaves — signs in to the console as an operator
// would (the sign-in form exchanges the admin token for a session cookie), then times each page
// with sequential requests (BENCH_CONSOLE_REQUESTS, default 30, after a warm-up): p50 / p99 and
// each as a multiple of the empty request (GET /healthz) timed the same way in the same run, plus
// the D1 rows one request of the page reads (the local meter, /__local/meter). Registering
// 10,000 servers takes minutes, so this runs only when named: `npm run bench -- console`.
import { apiOf, ok, pool } from "../http.ts";
import type { BenchContext } from "../run.ts";

const N = Number(process.env.BENCH_CONSOLE_N ?? 10_000);
const REQUESTS = Number(process.env.BENCH_CONSOLE_REQUESTS ?? 30);
const WARM_UP = 3;
const PARALLEL = 32;
const EVERY = 100; // 1% failed, 1% drifted
const AGENT = "fw-agent";
const OLD = { image: "registry.example/fw:1.0.0", version: "1.0.0" };
const NEW = { image: "registry.example/fw:2.0.0", version: "2.0.0" };

/** The host's report at its desired generation: what it was told to run, an install error, or a wrong image. */
const reportOf = (desired: { generation: number; agents: any[] }, how: "realized" | "failed" | "drifted") => ({
  generation: desired.generation,
  reconciled_at: new Date().toISOString(),
  boot_id: "b",
  agents:
    how === "failed"
      ? []
      : desired.agents.map((a) => ({
          ...a,
          state: "running",
          ...(how === "drifted" ? { image: "registry.example/fw:0.9.0", version: "0.9.0" } : {}),
        })),
  errors: how === "failed" ? [{ agent: AGENT, op: "install", message: "pull failed" }] : [],
  assignments: { units: [], storage: [] },
});

async function seed(ctx: BenchContext) {
  const api = apiOf(ctx);
  const fleet = `console-${N}-${Date.now().toString(36)}`;
  // A day before a silent server counts as stale: seeding takes minutes, and the fleet measured is
  // a healthy one (with the default 300 s, the first servers registered would be stale by then).
  await ok(await api("/v1/fleets", "POST", { id: fleet, stale_after_s: 86_400 }), "fleet");
  await ok(await api(`/v1/fleets/${fleet}/channels/${AGENT}`, "PUT", OLD), "channel");
  await ok(await api(`/v1/fleets/${fleet}/roles/edge`, "PUT", { agents: [{ name: AGENT }] }), "role");
  const ids: string[] = [];
  const started = Date.now();
  await pool([...Array(N).keys()], PARALLEL, async (i) => {
    const s = await ok(
      await api("/v1/servers", "POST", {
        fleet,
        hostname: `h-${i}.${fleet}.bench`,
        kind: "managed",
        roles: ["edge"],
        fleetlock_id: `fl-${i}`,
      }),
      "register",
    );
    ids[i] = s.id;
    const how = i % EVERY === 1 ? "failed" : i % EVERY === 2 ? "drifted" : "realized";
    const seen = await ok(await api("/v1/agent/inventory", "PUT", reportOf(s.desired, how), s.token), "report");
    if (seen.status !== how) throw new Error(`a ${how} report was taken as ${seen.status}`);
  });
  console.error(`  console: ${N} servers registered in ${((Date.now() - started) / 1000).toFixed(0)} s`);

  // The reboot group: two slots held, three hosts parked behind them. A parked host keeps its
  // place when its connection goes (until queue_wait_s), so the requests are dropped at once.
  console.error("  console: reboot group, holders, queue, rollout…");
  await ok(await api(`/v1/fleets/${fleet}/reboot-groups/default`, "PUT", { slots: 2, queue_wait_s: 1740 }), "group");
  const key = await ok(await api(`/v1/fleets/${fleet}/fleetlock-key`, "POST"), "fleetlock key");
  const lock = `${ctx.base}${new URL(key.base_url).pathname}v1/pre-reboot`;
  const preReboot = (id: string, signal?: AbortSignal) =>
    fetch(lock, {
      method: "POST",
      signal,
      headers: { "fleet-lock-protocol": "true" },
      body: JSON.stringify({ client_params: { id, group: "default" } }),
    });
  for (const id of ["fl-0", "fl-1"])
    if ((await preReboot(id)).status !== 200) throw new Error(`pre-reboot ${id} was not granted`);
  const parked = new AbortController();
  const waits = ["fl-3", "fl-4", "fl-5"].map((id) => preReboot(id, parked.signal).catch(() => undefined));
  await new Promise((r) => setTimeout(r, 1000));
  parked.abort();
  await Promise.all(waits);
  const group = await ok(await api(`/v1/fleets/${fleet}/reboot-groups/default`), "group view");
  if (group.holders.length !== 2 || group.queue.length !== 3)
    throw new Error(`group: ${group.holders.length} holders, ${group.queue.length} queued`);

  // A rollout that stays running: nobody answers, and its servers have an hour each.
  const rollout = await ok(
    await api("/v1/rollouts", "POST", { fleet, agent: AGENT, ...NEW, concurrency: 10, server_timeout_s: 3600 }),
    "rollout",
  );
  return { fleet, server: ids[EVERY + 1], rollout: rollout.id as string };
}

/** Signs in through the console's form: its CSRF cookie and field, this origin, the admin token. */
async function signIn(ctx: BenchContext) {
  const form = await fetch(`${ctx.base}/console/sign-in`);
  const csrf = /hm_signin=([^;]+)/.exec(form.headers.getSetCookie().join("\n"))?.[1];
  await form.arrayBuffer();
  if (!csrf) throw new Error("sign-in: no CSRF cookie");
  const res = await fetch(`${ctx.base}/console/sign-in`, {
    method: "POST",
    redirect: "manual",
    headers: { "content-type": "application/x-www-form-urlencoded", cookie: `hm_signin=${csrf}`, origin: ctx.base },
    body: new URLSearchParams({ _csrf: csrf, next: "/console", token: ctx.admin }),
  });
  const session = /hm_session=([^;]+)/.exec(res.headers.getSetCookie().join("\n"))?.[1];
  if (res.status !== 303 || !session) throw new Error(`sign-in: ${res.status} ${await res.text()}`);
  return `hm_session=${session}`;
}

/** A GET, tried once more if the connection drops (the local server closes idle pooled connections). */
async function get(url: string, init: RequestInit = {}) {
  try {
    return await fetch(url, init);
  } catch (err) {
    if (!(err instanceof TypeError)) throw err;
    return fetch(url, init);
  }
}

/** Runs one phase of the scenario; a failure names it. */
async function phase<T>(name: string, fn: () => Promise<T>) {
  try {
    return await fn();
  } catch (err) {
    throw new Error(`console: ${name} failed`, { cause: err });
  }
}

const percentile = (sorted: number[], p: number) =>
  sorted[Math.min(sorted.length - 1, Math.ceil((p / 100) * sorted.length) - 1)];

/** p50 and p99 (ms) of REQUESTS sequential GETs of `path`, after a warm-up; every answer must be 200. */
async function timed(ctx: BenchContext, path: string, cookie?: string) {
  const times: number[] = [];
  for (let i = 0; i < WARM_UP + REQUESTS; i++) {
    const t0 = performance.now();
    const res = await get(`${ctx.base}${path}`, { headers: cookie ? { cookie } : {}, redirect: "manual" });
    const body = await res.text();
    if (res.status !== 200) throw new Error(`${path}: ${res.status} ${body.slice(0, 300)}`);
    if (i >= WARM_UP) times.push(performance.now() - t0);
  }
  times.sort((a, b) => a - b);
  return { p50: percentile(times, 50), p99: percentile(times, 99) };
}

/** D1 rows read by one request of `path` (the fewest of three, so background work elsewhere does not count). */
async function rowsRead(ctx: BenchContext, path: string, cookie: string) {
  const meter = async (method: "GET" | "DELETE") => {
    const res =
      method === "GET" ? await get(`${ctx.base}/__local/meter`) : await fetch(`${ctx.base}/__local/meter`, { method });
    if (!res.ok) throw new Error(`/__local/meter: ${res.status}`);
    const m = (await res.json()) as {
      worker: { d1: { rows_read: number } };
      objects: Record<string, { d1: { rows_read: number } }>;
      d1_unattributed: { rows_read: number };
    };
    return (
      m.worker.d1.rows_read +
      m.d1_unattributed.rows_read +
      Object.values(m.objects).reduce((n, o) => n + o.d1.rows_read, 0)
    );
  };
  let fewest = Infinity;
  for (let i = 0; i < 3; i++) {
    await meter("DELETE");
    await (await get(`${ctx.base}${path}`, { headers: { cookie } })).arrayBuffer();
    fewest = Math.min(fewest, await meter("GET"));
  }
  return fewest;
}

export async function run(ctx: BenchContext) {
  if (!process.argv.slice(2).includes("console") && !process.env.BENCH_CONSOLE_N) {
    ctx.note("console: skipped (run `npm run bench -- console`, or set BENCH_CONSOLE_N)", "-");
    return;
  }
  const { fleet, server, rollout } = await phase("seeding", () => seed(ctx));
  const cookie = await phase("sign-in", () => signIn(ctx));
  const f = `fleet=${fleet}`;
  const pages: [string, string][] = [
    ["all fleets", `/console/fleets`],
    ["overview", `/console?${f}`],
    ["servers", `/console/servers?${f}`],
    ["servers, status failed", `/console/servers?${f}&status=failed`],
    ["servers, hostname prefix", `/console/servers?${f}&hostname=h-12`],
    ["a server", `/console/servers/${server}?${f}`],
    ["reboot groups", `/console/groups?${f}`],
    ["a reboot group", `/console/groups/default?${f}`],
    ["rollouts", `/console/rollouts?${f}`],
    ["a rollout", `/console/rollouts/${rollout}?${f}`],
    ["drift", `/console/drift?${f}`],
    ["audit", `/console/audit?${f}`],
  ];
  const empty = await phase("empty request", () => timed(ctx, "/healthz"));
  const table = [
    `| page (${N} servers) | p50 / p99 ms | × empty request (p50 / p99) | D1 rows read |`,
    "|---|---:|---:|---:|",
  ];
  table.push(`| empty request (GET /healthz) | ${empty.p50.toFixed(1)} / ${empty.p99.toFixed(1)} | 1 / 1 | 0 |`);
  for (const [name, path] of pages) {
    const t = await phase(name, () => timed(ctx, path, cookie));
    const rows = await phase(`${name}: rows read`, () => rowsRead(ctx, path, cookie));
    const ratio = `${(t.p50 / empty.p50).toFixed(1)} / ${(t.p99 / empty.p99).toFixed(1)}`;
    table.push(`| ${name} | ${t.p50.toFixed(0)} / ${t.p99.toFixed(0)} | ${ratio} | ${rows} |`);
    ctx.note(
      `console (${N} servers): ${name} — p50 / p99 ms, × empty (p50 / p99), D1 rows read`,
      `${t.p50.toFixed(0)} / ${t.p99.toFixed(0)}, ${ratio}, ${rows}`,
    );
  }
  const after = await timed(ctx, "/healthz");
  table.push(
    `| empty request again, after the pages | ${after.p50.toFixed(1)} / ${after.p99.toFixed(1)} | ${(after.p50 / empty.p50).toFixed(2)} / ${(after.p99 / empty.p99).toFixed(2)} | |`,
  );
  console.error(["", ...table, ""].join("\n"));
}
