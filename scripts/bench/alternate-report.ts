#!/usr/bin/env node
// `npx tsx scripts/bench/alternate-report.ts <before-checkout> [rounds] [seconds]`: an unchanged
// report's (as a real host sends it: same content, a new reconciled_at) runtime CPU a request, before and after a change, beside the floor fixture's write of
// the same body (POST /do/body), all three direct (./direct-server.ts: one workerd each, the
// deployed entry). `<before-checkout>` is another copy of the repository (`git archive <rev> |
// tar -x -C dir`, with a node_modules), whose own direct-server builds its own bundle. The three
// are started side by side and loaded in turn, a few seconds each, in alternating order round
// after round, so a busy machine's load falls on all three alike; the medians are what to read.
// State on /dev/shm (tmpfs), removed at the end. Loopback only, bounded in time.
import { resolve } from "node:path";
import autocannon from "autocannon";
import { startDirectFloor, startDirectServer, type DirectServer } from "./direct-server.ts";
import { freshReportBodies, hostReportBody } from "./host-report.ts";
import { registerReportingServers } from "./report-fleet.ts";

const [beforeDir, roundsArg, secondsArg] = process.argv.slice(2);
if (!beforeDir) {
  console.error("usage: alternate-report.ts <before-checkout> [rounds] [seconds]");
  process.exit(2);
}
const rounds = Number(roundsArg ?? 7);
const seconds = Number(secondsArg ?? 3);
// The floor writes a report's body; the report is sent as a real host sends an unchanged one (a
// new reconciled_at each time), the same size.
const body = hostReportBody(2);
const freshBody = freshReportBodies(2);
const stateParent = "/dev/shm";

/** 16 connections for `d` seconds: the unchanged report round-robin over `tokens`, or the floor's body write. */
function load(url: string, tokens: string[] | null, d: number) {
  let n = 0;
  return new Promise<autocannon.Result>((res, rej) =>
    autocannon(
      {
        url,
        connections: 16,
        duration: d,
        requests: [
          tokens
            ? {
                method: "PUT",
                path: "/v1/agent/inventory",
                setupRequest: (req) => ({
                  ...req,
                  headers: {
                    authorization: `Bearer ${tokens[n++ % tokens.length]}`,
                    "content-type": "application/json",
                  },
                  body: freshBody(),
                }),
              }
            : { method: "POST", path: "/do/body", headers: { "content-type": "application/json" }, body },
        ],
      },
      (err, r) => (err ? rej(err) : res(r)),
    ),
  );
}

const median = (a: number[]) => [...a].sort((p, q) => p - q)[Math.floor(a.length / 2)];

async function main() {
  const before = (await import(resolve(beforeDir, "scripts/bench/direct-server.ts"))) as {
    startDirectServer: typeof startDirectServer;
  };
  const servers: DirectServer[] = [];
  try {
    // One at a time: each start tells its runtime's process by the ones new since it began.
    const old = await before.startDirectServer({}, { stateParent });
    servers.push(old);
    const now = await startDirectServer({}, { stateParent });
    servers.push(now);
    const floor = await startDirectFloor({ stateParent });
    servers.push(floor);
    const subjects = [
      { name: "unchanged report, before", s: old, tokens: await registerReportingServers(old, "alternate") },
      { name: "unchanged report, after", s: now, tokens: await registerReportingServers(now, "alternate") },
      { name: "floor: write of a report's body", s: floor, tokens: null },
    ];
    for (const x of subjects) await load(x.s.url, x.tokens, 2);
    const cpu = new Map<string, number[]>();
    const rps = new Map<string, number[]>();
    for (let r = 0; r < rounds; r++) {
      for (const x of r % 2 ? [...subjects].reverse() : subjects) {
        const c0 = x.s.cpuMs();
        const res = await load(x.s.url, x.tokens, seconds);
        const c1 = x.s.cpuMs();
        if (res.non2xx || res.errors) throw new Error(`${x.name}: ${res.non2xx} non-2xx, ${res.errors} errors`);
        if (c0 === null || c1 === null) throw new Error("the runtime's CPU time cannot be read (/proc)");
        cpu.set(x.name, [...(cpu.get(x.name) ?? []), (c1 - c0) / res.requests.total]);
        rps.set(x.name, [...(rps.get(x.name) ?? []), res.requests.total / seconds]);
      }
    }
    console.log(`| ${rounds} rounds of ${seconds} s | runtime CPU ms a request, median (range) | req/s, median |`);
    console.log("|---|---:|---:|");
    for (const x of subjects) {
      const c = cpu.get(x.name)!;
      console.log(
        `| ${x.name} | ${median(c).toFixed(3)} (${Math.min(...c).toFixed(3)}–${Math.max(...c).toFixed(3)}) | ${median(rps.get(x.name)!).toFixed(0)} |`,
      );
    }
  } finally {
    await Promise.all(servers.map((s) => s.stop()));
  }
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
