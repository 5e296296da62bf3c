// Host operations against the per-server ledgers: 304 polls, unchanged and changed reports,
// and the D1 writes each unchanged report costs (read from the local server's D1 counters around the load).
import { AGENTS, freshReportBodies, hostReport, hostReportBody } from "../host-report.ts";
import type { BenchContext } from "../run.ts";

const SERVERS = 64;
const report = hostReport;
const reportBody = hostReportBody;

/** A fleet of SERVERS servers, each with its desired config and a first report (realized): their tokens. */
async function fleetOf(api: Pick<BenchContext, "client" | "clientFor">) {
  const fleet = `bench-${Date.now().toString(36)}`;
  const f = await api.client.v1.fleets.$post({ json: { id: fleet } });
  if (f.status !== 201) throw new Error(`fleet: ${f.status} ${await f.text()}`);
  const tokens: string[] = [];
  for (let i = 0; i < SERVERS; i++) {
    const s = await api.client.v1.servers.$post({ json: { fleet, hostname: `host-${i}.bench`, kind: "managed" } });
    if (s.status !== 201) throw new Error(`server: ${s.status} ${await s.text()}`);
    const server = await s.json();
    const d = await api.client.v1.servers[":id"].desired.$put({
      param: { id: server.id },
      json: { generation: 2, agents: AGENTS },
    });
    if (d.status !== 200) throw new Error(`desired: ${d.status} ${await d.text()}`);
    const r = await api.clientFor(server.token).v1.agent.inventory.$put({ json: report(2) });
    if (r.status !== 200) throw new Error(`report: ${r.status} ${await r.text()}`);
    const accepted = await r.json();
    if (accepted.status !== "realized") throw new Error(`report: ${JSON.stringify(accepted)}`);
    tokens.push(server.token);
  }
  return tokens;
}

/**
 * The unchanged report's load: every server in turn, as a real host sends it (the same content,
 * a new `reconciled_at` each time: never the same text twice), as many bytes as the floor's write
 * of a report's body.
 */
const unchangedLoad = (tokens: string[]) => {
  let n = 0;
  const body = freshReportBodies(2);
  return {
    requests: [
      {
        method: "PUT" as const,
        path: "/v1/agent/inventory",
        setupRequest: (req: object) => ({
          ...req,
          headers: { authorization: `Bearer ${tokens[n++ % tokens.length]}`, "content-type": "application/json" },
          body: body(),
        }),
      },
    ],
  };
};

export async function run(ctx: BenchContext) {
  base = ctx.base;
  const tokens = await fleetOf(ctx);
  let n = 0;
  const nextToken = () => tokens[n++ % tokens.length];

  await ctx.measure("GET /v1/agent/desired → 304", {
    requests: [
      {
        method: "GET",
        path: "/v1/agent/desired",
        setupRequest: (req) => ({
          ...req,
          headers: { authorization: `Bearer ${nextToken()}`, "if-none-match": '"2"' },
        }),
      },
    ],
  });

  // Reference, not a goal: the cheapest answer that needs the server's ledger at all (a token with
  // the right server id and a wrong secret, refused by the ledger). No host operation can beat
  // one Durable Object round trip, so this is the floor the figures above and below sit on.
  const wrongSecret = tokens.map((t) => t.replace(/\.[^.]+$/, ".AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"));
  let w = 0;
  await ctx.measure("reference: one ledger round trip (wrong secret → 401)", {
    requests: [
      {
        method: "GET",
        path: "/v1/agent/desired",
        setupRequest: (req) => ({
          ...req,
          headers: { authorization: `Bearer ${wrongSecret[w++ % wrongSecret.length]}` },
        }),
      },
    ],
  });

  const writesBefore = await ctx.d1Writes();
  const row = await ctx.measure("PUT /v1/agent/inventory, unchanged", unchangedLoad(tokens));
  const writesAfter = await ctx.d1Writes();
  ctx.note("D1 write statements per unchanged report", ((writesAfter - writesBefore) / row.requests).toFixed(4));
  ctx.goal("unchanged report, × floor DO write (one bare object write)", row.rps / ctx.floors.write, ">=", 1);
  ctx.goal("unchanged report, × floor write of a report's body (wrangler dev)", row.rps / ctx.floors.body, ">=", 1);

  // The same report on the runtime a deployment has (no wrangler dev proxy in front, the deployed
  // entry without the bench's meter), against the floor fixture served the same way and measured
  // just before it (docs/benchmarks.md, "The unchanged report measured as deployed").
  const direct = await ctx.direct();
  const directTokens = await fleetOf(direct);
  await direct.measureFloors();
  const directRow = await direct.measure("PUT /v1/agent/inventory, unchanged", unchangedLoad(directTokens));
  ctx.goal("unchanged report direct, × floor DO write (direct)", directRow.rps / direct.floors.write, ">=", 1);
  ctx.goal(
    "unchanged report direct, × floor write of a report's body (direct)",
    directRow.rps / direct.floors.body,
    ">=",
    1,
  );
  // The same comparison in runtime CPU a request (the floor's over the report's), which a busy
  // machine moves less than req/s: the figure to compare code by between runs.
  const floorCpu = direct.floorCpuMs.body;
  if (floorCpu !== null && directRow.cpu_ms)
    ctx.goal(
      "unchanged report direct, runtime CPU of the write of a report's body ÷ the report's (direct)",
      floorCpu / directRow.cpu_ms,
      ">=",
      1,
    );

  // Each server alternates between two reports that the index shows differently (one agent
  // running, then stopped), so every report is a real change and costs a projection.
  const flip = new Map<string, number>();
  const variants = [reportBody(2, "stopped"), reportBody(2, "running")];
  const changedBefore = await ctx.d1Writes();
  await meter("DELETE");
  const cpuBefore = ctx.serverCpuMs();
  const changed = await ctx.measure("PUT /v1/agent/inventory, changed", {
    requests: [
      {
        method: "PUT",
        path: "/v1/agent/inventory",
        setupRequest: (req) => {
          const token = nextToken();
          const k = (flip.get(token) ?? 0) + 1;
          flip.set(token, k);
          return {
            ...req,
            headers: { authorization: `Bearer ${token}`, "content-type": "application/json" },
            body: variants[k % 2],
          };
        },
      },
    ],
  });
  ctx.goal("changed report, × ceiling (empty request)", changed.ratio, ">=", 0.4);
  const changedAfter = await ctx.d1Writes();
  ctx.note("D1 write statements per changed report", ((changedAfter - changedBefore) / changed.requests).toFixed(2));
  // What the reports left in their outboxes (deliveries after the answer) is part of their cost.
  await new Promise((r) => setTimeout(r, 1_500));
  profile(ctx, changed.requests, await meter("GET"), cpuBefore);
}

type Reading = {
  worker: { requests: number };
  objects: Record<
    string,
    {
      requests: number;
      awake_ms: number;
      d1: { statements: number; rows_written: number };
      storage: { rows_read: number; rows_written: number; alarms_set: number };
      methods: Record<string, { calls: number; ms: number }>;
    }
  >;
};

async function meter(method: "GET" | "DELETE"): Promise<Reading> {
  const res = await fetch(`${base}/__local/meter`, { method });
  if (!res.ok) throw new Error(`/__local/meter: ${res.status}`);
  return (await res.json()) as Reading;
}
let base = "";

/**
 * Where a changed report's time goes: per object class, the calls it made per report, their wall
 * time (a call's start to its answer, awaited I/O included), and the storage and D1 rows written
 * per report, from the local meter over the load; and the runtime's CPU per report.
 */
function profile(ctx: BenchContext, reports: number, m: Reading, cpuBefore: number | null) {
  const per = (n: number) => (n / reports).toFixed(2);
  const cpuAfter = ctx.serverCpuMs();
  if (cpuBefore !== null && cpuAfter !== null)
    ctx.note(
      "changed report: runtime CPU ms per report (every process of the local server)",
      per(cpuAfter - cpuBefore),
    );
  ctx.note("changed report: Worker requests per report", per(m.worker.requests));
  for (const [name, c] of Object.entries(m.objects)) {
    if (!c.requests) continue;
    const calls = Object.entries(c.methods)
      .map(([method, t]) => `${method} ${per(t.calls)}× ${(t.ms / Math.max(1, t.calls)).toFixed(1)} ms`)
      .join(", ");
    ctx.note(
      `changed report: ${name} per report`,
      `${per(c.requests)} requests (${calls}); awake ${per(c.awake_ms)} ms; storage rows written ${per(c.storage.rows_written)} (alarms ${per(c.storage.alarms_set)}), read ${per(c.storage.rows_read)}; D1 statements ${per(c.d1.statements)}, rows written ${per(c.d1.rows_written)}`,
    );
  }
}
