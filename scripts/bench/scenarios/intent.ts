// Fleet intent at scale (docs/operator-guide.md): for fleets of N servers (BENCH_INTENT_N, default 1000,5000),
// (1) one role change: wall time and D1 statements for the planner to converge, per affected server;
// (2) one cron tick with 100 newly stale servers: D1 statements and rows read, which must not grow with N.
import { apiOf, ok, pool } from "../http.ts";
import type { BenchContext } from "../run.ts";

const SIZES = (process.env.BENCH_INTENT_N ?? "1000,5000").split(",").map(Number);
const AFFECTED_EVERY = 10; // one server in ten has the role that changes
const NEWLY_STALE = 100;
const STALE_AFTER_S = 10;
const PARALLEL = 16;

export async function run(ctx: BenchContext) {
  // Registering 6,000 servers takes minutes on a development machine: only when asked for.
  if (!process.argv.slice(2).includes("intent") && !process.env.BENCH_INTENT_N) {
    ctx.note("intent: skipped (run `npm run bench -- intent`, or set BENCH_INTENT_N)", "-");
    return;
  }
  const api = apiOf(ctx);
  const statements = async () => ({
    reads: await ctx.metric("harbormaster_d1_statements_total", 'kind="read"'),
    writes: await ctx.metric("harbormaster_d1_statements_total", 'kind="write"'),
  });

  for (const n of SIZES) {
    const fleet = `intent-${n}-${Date.now().toString(36)}`;
    await ok(await api("/v1/fleets", "POST", { id: fleet, stale_after_s: STALE_AFTER_S }), "fleet");
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

    const started = Date.now();
    const servers: { id: string; token: string; edge: boolean }[] = new Array(n);
    await pool([...Array(n).keys()], PARALLEL, async (i) => {
      const edge = i % AFFECTED_EVERY === 0;
      const s = await ok(
        await api("/v1/servers", "POST", {
          fleet,
          hostname: `h-${i}.${fleet}.bench`,
          kind: "managed",
          roles: [edge ? "edge" : "compute"],
        }),
        "register",
      );
      servers[i] = { id: s.id, token: s.token, edge };
    });
    ctx.note(
      `intent N=${n}: registration (planned first config), ms per server`,
      ((Date.now() - started) / n).toFixed(1),
    );

    // (1) One role change; the answer comes once the planner has converged (or says what remains).
    const affected = servers.filter((s) => s.edge).length;
    const before = await statements();
    const t0 = performance.now();
    const res = await ok(
      await api(`/v1/fleets/${fleet}/roles/edge`, "PUT", {
        agents: [{ name: "base" }, { name: "logs" }, { name: "fw" }],
      }),
      "role change",
    );
    const ms = performance.now() - t0;
    const after = await statements();
    if (res.planning.remaining || res.planning.issued !== affected)
      throw new Error(`planner did not converge inline: ${JSON.stringify(res.planning)}`);
    const sample = await ok(await api(`/v1/servers/${servers.find((s) => !s.edge)!.id}/desired`), "desired");
    if (sample.generation !== 1) throw new Error("an unaffected server was re-planned");
    ctx.note(`intent N=${n}: role change → ${affected} servers re-planned, total ms`, ms.toFixed(0));
    ctx.note(`intent N=${n}: role change, ms per affected server`, (ms / affected).toFixed(2));
    ctx.note(
      `intent N=${n}: role change, D1 statements per affected server (reads / writes)`,
      `${((after.reads - before.reads) / affected).toFixed(2)} / ${((after.writes - before.writes) / affected).toFixed(2)}`,
    );

    // (2) 100 servers report once, then fall silent past stale_after; one cron tick marks them.
    await pool(servers.slice(0, NEWLY_STALE), PARALLEL, async (s) => {
      const d = await ok(await api("/v1/agent/desired", "GET", undefined, s.token), "poll");
      await ok(
        await api(
          "/v1/agent/inventory",
          "PUT",
          { generation: d.generation, reconciled_at: new Date().toISOString(), boot_id: "b", agents: [] },
          s.token,
        ),
        "report",
      );
    });
    await new Promise((r) => setTimeout(r, (STALE_AFTER_S + 2) * 1000));
    const tick = async () => {
      const s0 = await statements();
      const t = performance.now();
      const fired = await fetch(`${ctx.base}/__scheduled?cron=${encodeURIComponent("* * * * *")}`);
      if (!fired.ok) throw new Error(`scheduled: ${fired.status}`);
      const elapsed = performance.now() - t;
      const s1 = await statements();
      return {
        ms: elapsed,
        reads: s1.reads - s0.reads,
        writes: s1.writes - s0.writes,
      };
    };
    const first = await tick();
    const second = await tick();
    ctx.note(
      `intent N=${n}: cron tick with ${NEWLY_STALE} newly stale (D1 statements r+w / ms)`,
      `${first.reads}+${first.writes} / ${first.ms.toFixed(0)}`,
    );
    ctx.note(
      `intent N=${n}: next cron tick, nothing newly stale (D1 statements r+w / ms)`,
      `${second.reads}+${second.writes} / ${second.ms.toFixed(0)}`,
    );
  }
}
