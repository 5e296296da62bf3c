// One disruption budget for a reboot wave and a rollout (docs/reboot-safety.md#one-disruption-budget):
// ZONES × PER_ZONE servers labelled by zone, a fleet budget of `per_label: {zone: 1}`, a reboot
// group of ZONES slots, a rollout of concurrency ZONES. Each server plays two loops with time
// compressed like ./wave.ts: Zincati (a pre-reboot every TICK_MS until granted, a REBOOT_MS reboot,
// steady state) and an agent (polls its desired config every POLL_MS, realizes a new generation
// after APPLY_MS). Run three ways on fresh fleets: the reboot wave alone, the rollout alone, and
// both together. Reported: each wall time, the combined run against the two one after the other,
// and the most servers of one zone ever seen disrupted (sampled through the operator API), which
// must stay 1. Loopback only; each run stops by itself (everything done, or LIMIT_MS).
import type { BenchContext } from "../run.ts";

const ZONES = Number(process.env.BENCH_BUDGET_ZONES ?? 4);
const PER_ZONE = Number(process.env.BENCH_BUDGET_PER_ZONE ?? 6);
const TICK_MS = 2000;
const REBOOT_MS = 600;
const POLL_MS = 300;
const APPLY_MS = 300;
const SAMPLE_MS = 150;
const LIMIT_MS = 180_000;
const AGENT = "bench-agent";

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

interface Server {
  id: string;
  token: string;
  zone: string;
  fleetlockId: string;
}

function caller(ctx: BenchContext) {
  return async (method: string, path: string, body?: unknown, token = ctx.admin) => {
    const res = await fetch(`${ctx.base}${path}`, {
      method,
      headers: { Authorization: `Bearer ${token}`, "Content-Type": "application/json" },
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    const text = await res.text();
    if (!res.ok) throw new Error(`${method} ${path}: ${res.status} ${text}`);
    return text ? JSON.parse(text) : null;
  };
}

const reportBody = (generation: number, image: string) => ({
  generation,
  reconciled_at: new Date().toISOString(),
  boot_id: "boot-1",
  agents: [{ name: AGENT, image, version: image.split(":")[1], instance_id: `i-${AGENT}`, state: "running" }],
  errors: [],
  assignments: { units: [], storage: [] },
});

async function setup(ctx: BenchContext) {
  const call = caller(ctx);
  const fleet = `budget-${Date.now().toString(36)}`;
  await call("POST", "/v1/fleets", { id: fleet, disruption_budget: { per_label: { zone: 1 } } });
  const key = await call("POST", `/v1/fleets/${fleet}/fleetlock-key`);
  await call("PUT", `/v1/fleets/${fleet}/reboot-groups/default`, { slots: ZONES, queue_wait_s: 0 });
  const servers: Server[] = [];
  for (let z = 0; z < ZONES; z++)
    for (let i = 0; i < PER_ZONE; i++) {
      const fleetlockId = `z${z}-${i}`;
      const s = await call("POST", "/v1/servers", {
        fleet,
        hostname: `z${z}-${i}.${fleet}.bench`,
        kind: "managed",
        fleetlock_id: fleetlockId,
        labels: { zone: `z${z}` },
      });
      const d = await call("PUT", `/v1/servers/${s.id}/desired`, {
        generation: 2,
        agents: [{ name: AGENT, image: "registry.example/bench:1", version: "1" }],
      });
      await call("PUT", "/v1/agent/inventory", reportBody(d.generation, "registry.example/bench:1"), s.token);
      servers.push({ id: s.id, token: s.token, zone: `z${z}`, fleetlockId });
    }
  return { fleet, url: `${ctx.base}${new URL(key.base_url).pathname}`, servers };
}

function fleetlock(url: string, op: "pre-reboot" | "steady-state", id: string) {
  return fetch(`${url}v1/${op}`, {
    method: "POST",
    headers: { "fleet-lock-protocol": "true" },
    body: JSON.stringify({ client_params: { id, group: "default" } }),
  }).then(async (r) => {
    await r.arrayBuffer();
    return r.status;
  });
}

async function run1(ctx: BenchContext, what: { reboot: boolean; rollout: boolean }) {
  const call = caller(ctx);
  const { fleet, url, servers } = await setup(ctx);
  const deadline = Date.now() + LIMIT_MS;
  const zoneOf = new Map(servers.map((s) => [s.id, s.zone]));
  let running = true;
  let maxPerZone = 0;
  let samples = 0;
  let rolloutId: string | null = null;
  const sampler = (async () => {
    while (running) {
      const ids = new Set<string>();
      const g = await call("GET", `/v1/fleets/${fleet}/reboot-groups/default`).catch(() => null);
      for (const h of g?.holders ?? []) if (h.server) ids.add(h.server.id);
      if (rolloutId) {
        const t = await call("GET", `/v1/rollouts/${rolloutId}/targets?state=applying&limit=500`).catch(() => null);
        for (const x of t?.items ?? []) ids.add(x.server_id);
      }
      const per = new Map<string, number>();
      for (const id of ids) per.set(zoneOf.get(id)!, (per.get(zoneOf.get(id)!) ?? 0) + 1);
      maxPerZone = Math.max(maxPerZone, ...per.values(), 0);
      samples++;
      await sleep(SAMPLE_MS);
    }
  })();
  const start = Date.now();
  const zincati = async (s: Server) => {
    await sleep(Math.random() * TICK_MS);
    while ((await fleetlock(url, "pre-reboot", s.fleetlockId)) !== 200) {
      if (Date.now() > deadline) throw new Error(`${s.fleetlockId}: no reboot slot within ${LIMIT_MS} ms`);
      await sleep(TICK_MS);
    }
    await sleep(REBOOT_MS);
    while ((await fleetlock(url, "steady-state", s.fleetlockId)) !== 200) await sleep(TICK_MS);
  };
  let agentsDone = false;
  const agent = async (s: Server) => {
    let reported = 2;
    while (!agentsDone) {
      const d = await call("GET", "/v1/agent/desired", undefined, s.token);
      if (d.generation > reported) {
        await sleep(APPLY_MS);
        await call("PUT", "/v1/agent/inventory", reportBody(d.generation, d.agents[0].image), s.token);
        reported = d.generation;
      }
      await sleep(POLL_MS);
    }
  };
  const agents = what.rollout ? servers.map(agent) : [];
  const rollout = async () => {
    const r = await call("POST", "/v1/rollouts", {
      fleet,
      agent: AGENT,
      image: "registry.example/bench:2",
      version: "2",
      concurrency: ZONES,
    });
    rolloutId = r.id;
    for (;;) {
      const now = await call("GET", `/v1/rollouts/${r.id}`);
      if (now.state !== "running") {
        if (now.state !== "succeeded") throw new Error(`rollout ended ${now.state}: ${now.reason}`);
        return;
      }
      if (Date.now() > deadline) throw new Error(`the rollout did not finish within ${LIMIT_MS} ms`);
      await sleep(200);
    }
  };
  try {
    await Promise.all([...(what.reboot ? servers.map(zincati) : []), ...(what.rollout ? [rollout()] : [])]);
  } finally {
    agentsDone = true;
    running = false;
    await Promise.all([sampler, ...agents]);
  }
  const wallMs = Date.now() - start;
  return { wallMs, maxPerZone, samples, audit: await auditMaxPerZone(ctx, fleet, zoneOf) };
}

/**
 * The coordinator's grants and releases (reboot slots and rollout holds) replayed in the order it
 * decided them (audit ids, one outbox): the most servers of one zone disrupted at once. Exact,
 * unlike the API samples, which read the holders and the applying targets in two requests.
 */
async function auditMaxPerZone(ctx: BenchContext, fleet: string, zoneOf: Map<string, string>) {
  const call = caller(ctx);
  await sleep(2500); // host grants' audit rows wait up to a second to share a D1 batch
  const rows: { id: number; action: string; details: { server_id?: string } }[] = [];
  let cursor: string | null = null;
  do {
    const q: { items: typeof rows; next_cursor: string | null } = await call(
      "GET",
      `/v1/audit?target=${encodeURIComponent(`fleet:${fleet}`)}&limit=200${cursor ? `&cursor=${cursor}` : ""}`,
    );
    rows.push(...q.items);
    cursor = q.next_cursor;
  } while (cursor);
  rows.sort((a, b) => a.id - b.id);
  const held = new Map<string, number>();
  let max = 0;
  for (const r of rows) {
    const id = r.details?.server_id;
    if (!id) continue;
    const take = r.action === "fleetlock.grant" || r.action === "disruption.take";
    const give = ["fleetlock.release", "fleetlock.release_server", "disruption.release"].includes(r.action);
    if (!take && !give) continue;
    held.set(id, Math.max(0, (held.get(id) ?? 0) + (take ? 1 : -1)));
    const per = new Map<string, number>();
    for (const [s, n] of held) if (n > 0) per.set(zoneOf.get(s)!, (per.get(zoneOf.get(s)!) ?? 0) + 1);
    max = Math.max(max, ...per.values(), 0);
  }
  return max;
}

export async function run(ctx: BenchContext) {
  const reboot = await run1(ctx, { reboot: true, rollout: false });
  const rollout = await run1(ctx, { reboot: false, rollout: true });
  const both = await run1(ctx, { reboot: true, rollout: true });
  const sequential = reboot.wallMs + rollout.wallMs;
  ctx.note(`budget: servers (zones × per zone)`, `${ZONES * PER_ZONE} (${ZONES} × ${PER_ZONE}), per_label zone: 1`);
  ctx.note("budget: reboot wave alone (ms)", reboot.wallMs);
  ctx.note("budget: rollout alone (ms)", rollout.wallMs);
  ctx.note("budget: one after the other (ms)", sequential);
  ctx.note("budget: both together (ms)", both.wallMs);
  ctx.note("budget: together / one after the other", (both.wallMs / sequential).toFixed(2));
  ctx.note("budget: most servers of one zone disrupted, from the audit trail", both.audit);
  ctx.note(
    "budget: most of one zone in the API samples (two reads, not atomic)",
    `${both.maxPerZone} (${both.samples} samples)`,
  );
  if (both.audit > 1) throw new Error(`two servers of one zone were disrupted at once (${both.audit})`);
}
