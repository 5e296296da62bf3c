// Fleets as code (docs/fleets-as-code.md): one spec apply that changes one role, against the same role change
// through the API, in one fleet of N servers (BENCH_SPEC_N, default 2000; one server in ten has
// the role) in the same run: wall time and D1 statements per affected server. The two alternate
// (API, spec, API, spec, …; BENCH_SPEC_ROUNDS each, default 3), each re-planning the same servers
// (the role gains or loses an agent), and the medians are compared. Then export → apply of the
// same spec: nothing written, nobody re-planned.
import type { BenchContext } from "../run.ts";
import { ok, pool } from "../http.ts";

const N = Number(process.env.BENCH_SPEC_N ?? 2000);
const ROUNDS = Number(process.env.BENCH_SPEC_ROUNDS ?? 3);
const AFFECTED_EVERY = 10;
const PARALLEL = 16;

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];

export async function run(ctx: BenchContext) {
  // Registering thousands of servers takes minutes on a development machine: only when asked for.
  if (!process.argv.slice(2).includes("spec") && !process.env.BENCH_SPEC_N) {
    ctx.note("spec: skipped (run `npm run bench -- spec`, or set BENCH_SPEC_N)", "-");
    return;
  }
  const api = (path: string, method = "GET", body?: unknown, headers: Record<string, string> = {}) =>
    fetch(`${ctx.base}${path}`, {
      method,
      headers: {
        authorization: `Bearer ${ctx.admin}`,
        ...(body ? { "content-type": "application/json" } : {}),
        ...headers,
      },
      body: body ? JSON.stringify(body) : undefined,
    });
  const statements = async () => ({
    reads: await ctx.metric("harbormaster_d1_statements_total", 'kind="read"'),
    writes: await ctx.metric("harbormaster_d1_statements_total", 'kind="write"'),
  });

  const fleet = `spec-${N}-${Date.now().toString(36)}`;
  await ok(await api("/v1/fleets", "POST", { id: fleet }), "fleet");
  for (const [agent, image] of [
    ["base", "base:1"],
    ["logs", "logs:1"],
    ["fw", "fw:1"],
  ]) {
    await ok(await api(`/v1/fleets/${fleet}/channels/${agent}`, "PUT", { image, version: "1" }), "channel");
  }
  await ok(await api(`/v1/fleets/${fleet}/roles/compute`, "PUT", { agents: [{ name: "base" }] }), "role");
  await ok(
    await api(`/v1/fleets/${fleet}/roles/edge`, "PUT", { agents: [{ name: "base" }, { name: "logs" }] }),
    "role",
  );
  await ok(await api(`/v1/fleets/${fleet}/reboot-groups/default`, "PUT", { slots: 5 }), "group");
  const started = Date.now();
  await pool([...Array(N).keys()], PARALLEL, async (i) => {
    const edge = i % AFFECTED_EVERY === 0;
    const body = { fleet, hostname: `h-${i}.${fleet}.bench`, kind: "managed", roles: [edge ? "edge" : "compute"] };
    // A local worker restarted under load answers 503; a retry that finds the hostname taken
    // (409) means the first attempt registered it.
    for (let attempt = 1; ; attempt++) {
      const res = await api("/v1/servers", "POST", body);
      if (attempt > 1 && res.status === 409) return void (await res.body?.cancel());
      if (res.status !== 503 || attempt >= 5) return void (await ok(res, "register"));
      await res.body?.cancel();
      await new Promise((r) => setTimeout(r, 1000 * attempt));
    }
  });
  console.error(`  ${N} servers registered in ${((Date.now() - started) / 1000).toFixed(1)} s`);
  const affected = Math.ceil(N / AFFECTED_EVERY);

  const withFw = [{ name: "base" }, { name: "fw" }, { name: "logs" }];
  const withoutFw = [{ name: "base" }, { name: "logs" }];
  const measure = async (how: "api" | "spec", agents: { name: string }[]) => {
    let body: unknown;
    let etag = "";
    if (how === "spec") {
      const res = await api(`/v1/fleets/${fleet}/spec`);
      etag = res.headers.get("ETag")!;
      const spec = await ok(res, "export");
      spec.roles.edge = { agents };
      body = spec;
    }
    const before = await statements();
    const t0 = performance.now();
    const out =
      how === "api"
        ? await ok(await api(`/v1/fleets/${fleet}/roles/edge`, "PUT", { agents }), "role change")
        : await ok(await api(`/v1/fleets/${fleet}/spec`, "PUT", body, { "if-match": etag }), "spec apply");
    const ms = performance.now() - t0;
    const after = await statements();
    if (out.planning.remaining || out.planning.issued !== affected)
      throw new Error(`${how}: planner did not converge inline: ${JSON.stringify(out.planning)}`);
    return { ms, reads: (after.reads - before.reads) / affected, writes: (after.writes - before.writes) / affected };
  };
  const runs = { api: [] as Awaited<ReturnType<typeof measure>>[], spec: [] as Awaited<ReturnType<typeof measure>>[] };
  for (let r = 0; r < ROUNDS; r++) {
    runs.api.push(await measure("api", withFw));
    runs.spec.push(await measure("spec", withoutFw));
  }
  for (const how of ["api", "spec"] as const) {
    const rs = runs[how];
    ctx.note(
      `spec N=${N}: ${how === "api" ? "role change through the API (PUT …/roles/edge)" : "spec apply changing that role (PUT …/spec)"} → ${affected} servers re-planned: ms per run (median of ${ROUNDS}; all)`,
      `${median(rs.map((r) => r.ms)).toFixed(0)} (${rs.map((r) => r.ms.toFixed(0)).join(", ")})`,
    );
    ctx.note(
      `spec N=${N}: ${how}: D1 statements per affected server (reads / writes, median)`,
      `${median(rs.map((r) => r.reads)).toFixed(2)} / ${median(rs.map((r) => r.writes)).toFixed(2)}`,
    );
  }
  const ratio = median(runs.spec.map((r) => r.ms)) / median(runs.api.map((r) => r.ms));
  ctx.note(`spec N=${N}: spec apply wall time / API role change (medians; goal ≤ 1.10)`, ratio.toFixed(2));

  // Round trip: the export applied as it is writes nothing and re-plans nobody.
  const res = await api(`/v1/fleets/${fleet}/spec`);
  const etag = res.headers.get("ETag")!;
  const spec = await ok(res, "export");
  const before = await statements();
  const same = await ok(
    await api(`/v1/fleets/${fleet}/spec?prune=true`, "PUT", spec, { "if-match": etag }),
    "round trip",
  );
  const after = await statements();
  if (same.changed || same.planning)
    throw new Error(`export → apply changed something: ${JSON.stringify(same.summary)}`);
  ctx.note(
    `spec N=${N}: export → apply of the same spec: D1 writes / servers re-planned`,
    `${after.writes - before.writes} / 0`,
  );
}
