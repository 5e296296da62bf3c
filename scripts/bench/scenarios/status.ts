// `hm status` against a fleet of N servers (BENCH_STATUS_N, default 10000): how many
// requests it makes and how long it takes, in-process through hm's own main(). Before GET
// /v1/status it paged through every server to count them on the client: N / 200 requests per
// fleet. Registering 10,000 servers takes minutes on a development machine, so this runs only
// when asked for: `npm run bench -- status`.
import { Readable } from "node:stream";
import { main } from "../../../cli/main.ts";
import { apiOf, ok, pool } from "../http.ts";
import type { BenchContext } from "../run.ts";

const N = Number(process.env.BENCH_STATUS_N ?? 10_000);
const FAILED_EVERY = 100; // 1% of the hosts report a failed install
const PARALLEL = 32;
const RUNS = 5;

export async function run(ctx: BenchContext) {
  if (!process.argv.slice(2).includes("status") && !process.env.BENCH_STATUS_N) {
    ctx.note("status: skipped (run `npm run bench -- status`, or set BENCH_STATUS_N)", "-");
    return;
  }
  const api = apiOf(ctx);
  const fleet = `status-${N}-${Date.now().toString(36)}`;
  await ok(await api("/v1/fleets", "POST", { id: fleet }), "fleet");
  const started = Date.now();
  await pool([...Array(N).keys()], PARALLEL, async (i) => {
    const s = await ok(
      await api("/v1/servers", "POST", { fleet, hostname: `h-${i}.${fleet}.bench`, kind: "managed" }),
      "register",
    );
    if (i % FAILED_EVERY === 0) {
      await ok(
        await api(
          "/v1/agent/inventory",
          "PUT",
          {
            generation: 1,
            reconciled_at: new Date().toISOString(),
            boot_id: "b",
            agents: [],
            errors: [{ agent: "base", op: "install", message: "pull failed" }],
            assignments: { units: [], storage: [] },
          },
          s.token,
        ),
        "report",
      );
    }
  });
  console.error(`  status: ${N} servers registered in ${((Date.now() - started) / 1000).toFixed(0)} s`);

  const times: number[] = [];
  let requests = 0;
  let shown = "";
  for (let r = 0; r < RUNS; r++) {
    requests = 0;
    let out = "";
    const counting: typeof fetch = (input, init) => (requests++, fetch(input, init));
    const t0 = performance.now();
    const code = await main(["status", "--fleet", fleet], {
      stdout: (s) => void (out += s),
      stderr: () => {},
      stdin: Readable.from([]),
      interactive: false,
      env: { HM_URL: ctx.base, HM_TOKEN: ctx.admin, HM_CONFIG: "/nonexistent/hm.json" },
      cwd: "/",
      fetch: counting,
    });
    times.push(performance.now() - t0);
    if (code !== 0) throw new Error(`hm status exited ${code}`);
    shown = out;
  }
  times.sort((a, b) => a - b);
  const failed = /failed (\d+)/.exec(shown)?.[1];
  if (Number(failed) !== Math.ceil(N / FAILED_EVERY))
    throw new Error(`hm status counted ${failed} failed, expected ${Math.ceil(N / FAILED_EVERY)}`);
  ctx.note(`hm status --fleet (${N} servers): requests`, requests);
  ctx.note(
    `hm status --fleet (${N} servers): wall ms, median of ${RUNS} (min–max)`,
    `${times[RUNS >> 1].toFixed(0)} (${times[0].toFixed(0)}–${times[RUNS - 1].toFixed(0)})`,
  );
  ctx.note(`hm status before GET /v1/status: requests (servers paged 200 at a time)`, Math.ceil(N / 200) + 3);
  console.error(`  status: ${requests} request(s), median ${times[RUNS >> 1].toFixed(0)} ms`);
}
