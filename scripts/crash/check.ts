// `npm run crash-check`: kill -9 the local server (wrangler dev, workerd included) in the middle of
// racing writes, restart it on the same state, and check that nothing acknowledged was lost and
// that the ledgers, the D1 index and the coordinator agree again by themselves. Loopback only;
// bounded rounds; stops by itself. Prints the time each round took to converge after restart.
import { api, crash, fleetlock, run, setUpFleet, sleep, start } from "./harness.ts";

const ROUNDS = Number(process.env.CRASH_ROUNDS ?? 8);
const SERVERS = Number(process.env.CRASH_SERVERS ?? 6);
const CONVERGE_LIMIT_MS = 60_000;

interface Server {
  id: string;
  token: string;
  fleetlockId: string;
  /** The highest desired generation acknowledged with a 2xx. */
  acked: number;
  /** The fleetlock_id acknowledged last, when a PATCH's answer arrived. */
  ackedFleetlockId: string;
}

async function main() {
  await start();
  const set = await setUpFleet("crash", SERVERS, (i) => ({ hostname: `h${i}.example.com`, fleetlock_id: `fl-${i}` }));
  const { fleet, key } = set;
  const servers: Server[] = set.servers.map((s, i) => ({
    ...s,
    fleetlockId: `fl-${i}`,
    acked: 1,
    ackedFleetlockId: `fl-${i}`,
  }));
  let acknowledged = 0;
  const convergence: number[] = [];
  for (let round = 0; round < ROUNDS; round++) {
    // Racing writes: desired PUTs, reports, and PATCHes that move fleetlock ids around.
    const stop = Date.now() + 200 + Math.floor(Math.random() * 1300);
    const workers = servers.map(async (s, i) => {
      let n = 0;
      while (Date.now() < stop) {
        n++;
        const generation = s.acked + 1;
        const ops: Promise<void>[] = [
          api("PUT", `/v1/servers/${s.id}/desired`, {
            generation,
            agents: [{ name: "compute", image: `compute:${generation}`, version: String(generation) }],
          }).then((r) => {
            if (r.status === 200) {
              s.acked = Math.max(s.acked, r.json.generation);
              acknowledged++;
            }
          }),
          api(
            "PUT",
            "/v1/agent/inventory",
            {
              generation: s.acked,
              reconciled_at: new Date().toISOString(),
              boot_id: `b-${round}-${n}`,
              agents: [],
              errors: [],
            },
            s.token,
          ).then(() => {}),
        ];
        if (n % 3 === 0) {
          const next = `fl-${i}-${round}-${n}`;
          ops.push(
            api("PATCH", `/v1/servers/${s.id}`, { fleetlock_id: next }).then((r) => {
              if (r.status === 200) {
                s.ackedFleetlockId = r.json.fleetlock_id;
                acknowledged++;
              }
            }),
          );
        }
        await Promise.all(ops.map((p) => p.catch(() => {})));
      }
    });
    const killer = sleep(Math.max(0, stop - Date.now() - 20)).then(crash);
    await Promise.all([...workers, killer]);
    crash();
    await start();
    const restarted = Date.now();
    // Converged: every ledger holds at least what was acknowledged, and the index and the
    // coordinator show exactly what each ledger holds.
    let lastProblem = "";
    for (;;) {
      lastProblem = await problems(fleet, key, servers);
      if (!lastProblem) break;
      if (Date.now() - restarted > CONVERGE_LIMIT_MS) {
        console.error(`round ${round}: NOT converged after ${CONVERGE_LIMIT_MS} ms: ${lastProblem}`);
        process.exitCode = 1;
        break;
      }
      await sleep(500);
    }
    const took = Date.now() - restarted;
    convergence.push(took);
    console.log(
      `round ${round + 1}/${ROUNDS}: converged ${took} ms after restart (${acknowledged} writes acknowledged so far)`,
    );
  }
  convergence.sort((a, b) => a - b);
  console.log(
    `\n${ROUNDS} kill -9 rounds, ${acknowledged} acknowledged writes: convergence after restart min ${convergence[0]} ms, ` +
      `median ${convergence[Math.floor(convergence.length / 2)]} ms, max ${convergence[convergence.length - 1]} ms`,
  );
}

async function problems(fleet: string, basePath: string, servers: Server[]): Promise<string> {
  const index = await api("GET", `/v1/servers?fleet=${fleet}&limit=500`);
  if (index.status !== 200) return `index answered ${index.status}`;
  const rows = new Map<string, any>(index.json.items.map((r: any) => [r.id, r]));
  const ids = new Set<string>();
  for (const s of servers) {
    const ledger = await api("GET", `/v1/servers/${s.id}`);
    if (ledger.status !== 200) return `server ${s.id}: ledger answered ${ledger.status}`;
    const v = ledger.json;
    if (v.desired_generation < s.acked)
      return `server ${s.id}: acknowledged generation ${s.acked} lost (ledger has ${v.desired_generation})`;
    const row = rows.get(s.id);
    if (!row) return `server ${s.id}: no index row`;
    if (row.desired_generation !== v.desired_generation)
      return `server ${s.id}: index generation ${row.desired_generation} ≠ ledger ${v.desired_generation}`;
    if (row.fleetlock_id !== v.fleetlock_id)
      return `server ${s.id}: index fleetlock_id ${row.fleetlock_id} ≠ ledger ${v.fleetlock_id}`;
    if (ids.has(v.fleetlock_id)) return `fleetlock_id ${v.fleetlock_id} held by two servers`;
    ids.add(v.fleetlock_id);
    // The coordinator grants to the ledger's id (and its steady-state gives the slot back).
    const pre = await fleetlock(basePath, "pre-reboot", v.fleetlock_id);
    if (pre.status !== 200) return `server ${s.id}: coordinator refused its id ${v.fleetlock_id}: ${await pre.text()}`;
    await fleetlock(basePath, "steady-state", v.fleetlock_id);
    s.fleetlockId = v.fleetlock_id;
    // Every generation the ledger holds was audited exactly once.
    const audit = await api("GET", `/v1/audit?target=server:${s.id}&limit=500`);
    const gens = audit.json.items
      .filter((e: any) => e.action === "server.desired.put")
      .map((e: any) => e.details.generation);
    if (new Set(gens).size !== gens.length) return `server ${s.id}: a desired PUT audited twice`;
    for (let g = 2; g <= v.desired_generation; g++)
      if (!gens.includes(g)) return `server ${s.id}: generation ${g} not audited`;
  }
  return "";
}

run(main);
