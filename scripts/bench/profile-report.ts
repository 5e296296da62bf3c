#!/usr/bin/env node
// `npx tsx scripts/bench/profile-report.ts [seconds] [desired|floor]`: where an unchanged report's
// (with `desired`, a 304 poll's; with `floor`, the floor fixture's write of the same report's body,
// POST /do/body, the yardstick the report is judged against) JavaScript time goes, in the runtime a deployment has (./direct-server.ts: one workerd, the deployed entry, no
// wrangler dev proxy, no meter). It registers the ledger scenario's 64 servers, sends their
// unchanged report for a warm-up, then again under a V8 CPU profile taken through the runtime's
// inspector (DevTools protocol: Profiler.start / Profiler.stop), and prints the isolate's busy time
// per report by the file (and the heaviest functions) the samples fell in: a count of work that a
// busy machine slows but does not multiply, unlike req/s. Loopback only, bounded in time.
// `--changed` (anywhere among the arguments): each server's reports alternate between one agent
// stopped and all running, the ledger scenario's changed report (a stored report, a projection
// batch, the outbox's round).
import { writeFileSync } from "node:fs";
import autocannon from "autocannon";
import { freePort } from "../local-server.ts";
import { inspectorSession, type Profile, type ProfileNode } from "./inspector.ts";
import { startDirectFloor, startDirectServer } from "./direct-server.ts";
import { freshReportBodies, hostReportBody } from "./host-report.ts";
import { registerReportingServers } from "./report-fleet.ts";

const changed = process.argv.includes("--changed");
const args = process.argv.slice(2).filter((a) => a !== "--changed");
const seconds = Number(args[0] ?? 5);
/**
 * `desired`: profile the host's poll (GET /v1/agent/desired, answered 304) instead of the report;
 * `floor`: the floor fixture's write of the report's body, profiled the same way, to read the two side by side.
 */
const route = args[1] === "desired" ? "desired" : args[1] === "floor" ? "floor" : "report";

function load(url: string, durationSec: number, tokens: string[]) {
  let n = 0;
  const bodies = [hostReportBody(2), hostReportBody(2, "stopped")];
  // As a real host sends them: a new reconciled_at on every report, changed or not.
  const fresh = [freshReportBodies(2), freshReportBodies(2, "stopped")];
  return new Promise<autocannon.Result>((res, rej) =>
    autocannon(
      {
        url,
        connections: 16,
        duration: durationSec,
        requests: [
          route === "floor"
            ? {
                method: "POST",
                path: "/do/body",
                headers: { "content-type": "application/json" },
                body: bodies[0],
              }
            : route === "desired"
              ? {
                  method: "GET",
                  path: "/v1/agent/desired",
                  setupRequest: (req) => ({
                    ...req,
                    headers: { authorization: `Bearer ${tokens[n++ % tokens.length]}`, "if-none-match": '"2"' },
                  }),
                }
              : {
                  method: "PUT",
                  path: "/v1/agent/inventory",
                  setupRequest: (req) => {
                    const i = n++;
                    return {
                      ...req,
                      headers: {
                        authorization: `Bearer ${tokens[i % tokens.length]}`,
                        "content-type": "application/json",
                      },
                      // Changed: a server's next report flips its first agent, so every report changes.
                      body: changed ? fresh[Math.floor(i / tokens.length) % 2]() : fresh[0](),
                    };
                  },
                },
        ],
      },
      (err, r) => (err ? rej(err) : res(r)),
    ),
  );
}

/** Self time (µs) by a key of each sample's frame, and by the file of every frame on its stack. */
function tally(profile: Profile, key: (f: ProfileNode["callFrame"]) => string) {
  const byId = new Map(profile.nodes.map((n) => [n.id, n]));
  const self = new Map<string, number>();
  for (let i = 0; i < profile.samples.length; i++) {
    const node = byId.get(profile.samples[i])!;
    const k = key(node.callFrame);
    self.set(k, (self.get(k) ?? 0) + (profile.timeDeltas[i + 1] ?? 0));
  }
  return self;
}

const fileOf = (f: ProfileNode["callFrame"]) =>
  f.url ? `${f.url.replace(/^.*\//, "")}` : f.functionName ? `(${f.functionName})` : "(native)";

async function main() {
  const inspectorPort = await freePort();
  const server =
    route === "floor" ? await startDirectFloor({ inspectorPort }) : await startDirectServer({}, { inspectorPort });
  try {
    const tokens = route === "floor" ? [] : await registerReportingServers(server, "profile");
    await load(server.url, 3, tokens);
    const inspector = await inspectorSession(inspectorPort);
    await inspector.send("Profiler.enable");
    await inspector.send("Profiler.setSamplingInterval", { interval: 50 });
    const cpu0 = server.cpuMs();
    await inspector.send("Profiler.start");
    const result = await load(server.url, seconds, tokens);
    const { profile } = (await inspector.send("Profiler.stop")) as { profile: Profile };
    const cpu1 = server.cpuMs();
    inspector.close();
    // The whole profile, for a look the tables below do not give (inclusive time by frame).
    if (process.env.PROFILE_OUT) writeFileSync(process.env.PROFILE_OUT, JSON.stringify(profile));
    const reports = result.requests.total;
    const idle = new Set(["(idle)", "(program)"]);
    const files = tally(profile, (f) => (idle.has(f.functionName) ? f.functionName : fileOf(f)));
    const fns = tally(profile, (f) => `${f.functionName || "(anonymous)"} ${fileOf(f)}:${f.lineNumber + 1}`);
    const busy = [...files].filter(([k]) => !idle.has(k)).reduce((s, [, v]) => s + v, 0);
    console.log(
      `${reports} ${route === "floor" ? "floor writes of a report's body" : route === "desired" ? "304 polls" : changed ? "changed reports" : "unchanged reports"} in ${seconds} s (${(reports / seconds).toFixed(0)}/s), target ${inspector.title}; ` +
        `runtime CPU ${cpu0 !== null && cpu1 !== null ? ((cpu1 - cpu0) / reports).toFixed(3) : "-"} ms a report (profiler on); ` +
        `isolate's thread busy ${(busy / reports).toFixed(1)} µs a report, (program) ${((files.get("(program)") ?? 0) / reports).toFixed(1)} µs`,
    );
    console.log("\n| file (self time) | µs a report |\n|---|---:|");
    for (const [k, v] of [...files]
      .filter(([k]) => !idle.has(k))
      .sort((a, b) => b[1] - a[1])
      .slice(0, 15))
      console.log(`| ${k} | ${(v / reports).toFixed(1)} |`);
    console.log("\n| function (self time) | µs a report |\n|---|---:|");
    for (const [k, v] of [...fns].sort((a, b) => b[1] - a[1]).slice(0, 40))
      if (!idle.has(k.split(" ")[0])) console.log(`| ${k} | ${(v / reports).toFixed(2)} |`);
    if (process.env.PROFILE_CALLERS) {
      // Who calls the named functions: their self time by the three frames above them.
      const parent = new Map<number, ProfileNode>();
      for (const n of profile.nodes) for (const c of n.children ?? []) parent.set(c, n);
      const want = new Set(process.env.PROFILE_CALLERS.split(","));
      const stacks = tally(profile, () => "");
      stacks.clear();
      const byId = new Map(profile.nodes.map((n) => [n.id, n]));
      for (let i = 0; i < profile.samples.length; i++) {
        let node = byId.get(profile.samples[i])!;
        if (!want.has(node.callFrame.functionName)) continue;
        const chain = [node.callFrame.functionName];
        for (let d = 0; d < 4 && parent.get(node.id); d++) {
          node = parent.get(node.id)!;
          chain.push(node.callFrame.functionName || "(anonymous)");
        }
        const k = chain.join(" < ");
        stacks.set(k, (stacks.get(k) ?? 0) + (profile.timeDeltas[i + 1] ?? 0));
      }
      console.log("\n| stack | µs a report |\n|---|---:|");
      for (const [k, v] of [...stacks].sort((a, b) => b[1] - a[1]).slice(0, 20))
        console.log(`| ${k} | ${(v / reports).toFixed(2)} |`);
    }
  } finally {
    await server.stop();
  }
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
