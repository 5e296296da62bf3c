// `npm run crash-check:fleetlock-ids`: a stream of PATCHes moving fleetlock_ids over several
// servers, kill -9 of the local server mid-stream, a restart on the same state; then, within 60 s
// and asking only the fleet's FleetLock endpoint (no read wakes a ledger first), every server's
// last acknowledged id must be accepted (pre-reboot, then steady-state) — or the id of the PATCH
// that was in flight when the server died, had its ledger committed it — and every id it held
// before must be refused. Finally each accepted id must be the one its ledger holds.
import { api, crash, fleetlock, run, setUpFleet, sleep, start } from "./harness.ts";

const ROUNDS = Number(process.env.CRASH_ROUNDS ?? 20);
const SERVERS = Number(process.env.CRASH_SERVERS ?? 6);
const CONVERGE_LIMIT_MS = 60_000;

interface Server {
  id: string;
  /** Every id it was given and then left (all must be refused). */
  left: string[];
  /** The id its last acknowledged PATCH (or its registration) gave it. */
  acked: string;
  /** The PATCH under way when the server died, if any: its ledger may have committed it. */
  inFlight: string | null;
}

/** Whether the coordinator takes the id now: pre-reboot 200 (then steady-state), or 403. */
async function accepted(key: string, id: string): Promise<boolean | string> {
  const pre = await fleetlock(key, "pre-reboot", id);
  if (pre.status === 403) return false;
  if (pre.status !== 200) return `pre-reboot of ${id} answered ${pre.status}: ${await pre.text()}`;
  const steady = await fleetlock(key, "steady-state", id);
  if (steady.status !== 200) return `steady-state of ${id} answered ${steady.status}: ${await steady.text()}`;
  return true;
}

/** What is still wrong, or "" once the coordinator answers as the acknowledged PATCHes say. */
async function problems(key: string, servers: Server[]): Promise<string> {
  for (const s of servers) {
    // The old ids first: a stale registry would still grant them.
    for (const old of s.left.slice(-12)) {
      const a = await accepted(key, old);
      if (a !== false) return `server ${s.id}: old id ${old} ${a === true ? "still accepted" : a}`;
    }
    const last = await accepted(key, s.acked);
    if (typeof last === "string") return `server ${s.id}: ${last}`;
    const next = s.inFlight ? await accepted(key, s.inFlight) : false;
    if (typeof next === "string") return `server ${s.id}: ${next}`;
    if (last === next)
      return `server ${s.id}: ${last ? "both" : "neither"} of acknowledged ${s.acked} and in-flight ${s.inFlight} accepted`;
  }
  return "";
}

async function main() {
  await start();
  const set = await setUpFleet("crash-ids", SERVERS, (i) => ({
    hostname: `id${i}.example.com`,
    fleetlock_id: `id-${i}`,
  }));
  const { key } = set;
  const servers: Server[] = set.servers.map((s, i) => ({ id: s.id, left: [], acked: `id-${i}`, inFlight: null }));
  let acknowledged = 0;
  let failed = 0;
  const convergence: number[] = [];
  for (let round = 0; round < ROUNDS; round++) {
    const stop = Date.now() + 1500 + Math.floor(Math.random() * 3000);
    let dead = false;
    const workers = servers.map(async (s, i) => {
      for (let n = 0; !dead && Date.now() < stop + 2000; n++) {
        const next = `id-${i}-${round}-${n}`;
        s.inFlight = next;
        try {
          const r = await api("PATCH", `/v1/servers/${s.id}`, { fleetlock_id: next });
          if (r.status !== 200) throw new Error(`PATCH answered ${r.status}: ${JSON.stringify(r.json)}`);
          s.left.push(s.acked);
          s.acked = next;
          s.inFlight = null;
          acknowledged++;
        } catch (err) {
          if (!dead) throw err;
          return; // killed under it: the id stays in flight
        }
      }
    });
    const killer = sleep(Math.max(0, stop - Date.now())).then(() => {
      dead = true;
      crash();
    });
    await Promise.all([...workers, killer]);
    await start();
    const restarted = Date.now();
    let problem = "";
    for (;;) {
      problem = await problems(key, servers);
      if (!problem || Date.now() - restarted > CONVERGE_LIMIT_MS) break;
      await sleep(500);
    }
    const took = Date.now() - restarted;
    // Only now the ledgers are read: each accepted id must be the one its ledger holds.
    for (const s of servers) {
      const held = (await api("GET", `/v1/servers/${s.id}`)).json.fleetlock_id;
      if (held !== s.acked && held !== s.inFlight)
        problem ||= `server ${s.id}: ledger holds ${held}, neither ${s.acked} nor ${s.inFlight}`;
      if (held === s.inFlight) {
        s.left.push(s.acked);
        s.acked = held;
      } else if (s.inFlight) s.left.push(s.inFlight);
      s.inFlight = null;
    }
    if (problem) {
      failed++;
      process.exitCode = 1;
      console.error(`round ${round + 1}/${ROUNDS}: NOT converged within ${CONVERGE_LIMIT_MS} ms: ${problem}`);
    } else {
      convergence.push(took);
      console.log(
        `round ${round + 1}/${ROUNDS}: every acknowledged id accepted, every old one refused, ${took} ms after restart (${acknowledged} PATCHes acknowledged so far)`,
      );
    }
  }
  convergence.sort((a, b) => a - b);
  console.log(
    `\n${ROUNDS} kill -9 rounds, ${acknowledged} acknowledged fleetlock_id PATCHes, ${failed} rounds failed; ` +
      `convergence after restart min ${convergence[0]} ms, median ${convergence[Math.floor(convergence.length / 2)]} ms, max ${convergence.at(-1)} ms`,
  );
}

run(main);
