#!/usr/bin/env node
// `node scripts/bench/ledger-wake.ts [before-checkout] [rounds] [servers] [--profile]`: what a
// ledger's wake costs, as a deployment runs it (./direct-server.ts: one workerd, the deployed
// entry, nothing in front). N servers (default 300) are registered and report once; once the
// runtime has put their ledgers to sleep, each host polls once (GET /v1/agent/desired, its
// generation current: a 304 answered by the ledger alone, no D1), which wakes its ledger ("asleep"),
// then at once polls again ("awake"). The runtime's CPU and the wall time of each phase, over the
// polls, are the figures; their difference is the wake. With `<before-checkout>` (another copy of
// the repository with its node_modules, e.g. `git archive main | tar -x -C dir`), both run side by
// side and are measured in turn, alternating their order round after round, so a busy machine's
// load falls on both alike; the medians are what to read. `--profile` takes a V8 CPU profile of
// the asleep phase (the last server's, through the runtime's inspector) and prints where the wake's
// time goes: the ledger's own start (its constructor and opening, inclusive) against the rest.
// State on /dev/shm (tmpfs), removed at the end. Loopback only, bounded in time.
import { writeFileSync } from "node:fs";
import http from "node:http";
import { resolve } from "node:path";
import { freePort } from "../local-server.ts";
import { inspectorSession, type Profile, type ProfileNode } from "./inspector.ts";
import { startDirectServer, type DirectServer } from "./direct-server.ts";

const flags = process.argv.slice(2).filter((a) => a.startsWith("--"));
const [beforeArg, roundsArg, serversArg] = process.argv.slice(2).filter((a) => !a.startsWith("--"));
const beforeDir = beforeArg && beforeArg !== "-" ? beforeArg : null;
const rounds = Number(roundsArg ?? 3);
const servers = Number(serversArg ?? 300);
const profiling = flags.includes("--profile");
/** Polls in flight at once: a few, so the runtime is busy but its queue short. */
const CONCURRENCY = 8;
/** How long to wait at most for the runtime to put the ledgers to sleep (it takes 10-40 s). */
const ASLEEP_WAIT_MS = 150_000;
const stateParent = "/dev/shm";
const agent = new http.Agent({ keepAlive: true, maxSockets: CONCURRENCY * 2 });

function request(url: string, method: string, headers: Record<string, string>, body?: string) {
  return new Promise<{ status: number; text: string }>((res, rej) => {
    const req = http.request(url, { method, headers, agent }, (r) => {
      let text = "";
      r.setEncoding("utf8");
      r.on("data", (c) => (text += c));
      r.on("end", () => res({ status: r.statusCode ?? 0, text }));
    });
    req.on("error", rej);
    req.end(body);
  });
}

async function pool<T>(items: T[], workers: number, fn: (item: T) => Promise<void>) {
  let i = 0;
  await Promise.all(
    Array.from({ length: workers }, async () => {
      while (i < items.length) await fn(items[i++]);
    }),
  );
}

interface Subject {
  name: string;
  server: DirectServer;
  tokens: string[];
}

/** N servers in a new fleet, each with one agent desired at generation 2 and a report of it. */
async function fleetOf(server: DirectServer, n: number): Promise<string[]> {
  const admin = { authorization: `Bearer ${server.admin}`, "content-type": "application/json" };
  const fleet = `wake-${Date.now().toString(36)}`;
  const f = await request(`${server.url}/v1/fleets`, "POST", admin, JSON.stringify({ id: fleet }));
  if (f.status !== 201) throw new Error(`fleet: ${f.status} ${f.text}`);
  const agents = [{ name: "fw-agent", image: "registry.example/fw:1.0.0", version: "1.0.0" }];
  const tokens: string[] = [];
  await pool(
    Array.from({ length: n }, (_, i) => i),
    16,
    async (i) => {
      const body = JSON.stringify({ fleet, hostname: `host-${i}.wake`, kind: "managed" });
      const s = await request(`${server.url}/v1/servers`, "POST", admin, body);
      if (s.status !== 201) throw new Error(`server: ${s.status} ${s.text}`);
      const { id, token } = JSON.parse(s.text) as { id: string; token: string };
      const d = await request(
        `${server.url}/v1/servers/${id}/desired`,
        "PUT",
        admin,
        JSON.stringify({ generation: 2, agents }),
      );
      if (d.status >= 300) throw new Error(`desired: ${d.status} ${d.text}`);
      const report = {
        generation: 2,
        reconciled_at: new Date().toISOString(),
        boot_id: "boot-1",
        agents: agents.map((a) => ({ ...a, instance_id: "i-0", state: "running" })),
        errors: [],
        assignments: { units: [], storage: [] },
      };
      const r = await request(
        `${server.url}/v1/agent/inventory`,
        "PUT",
        { authorization: `Bearer ${token}`, "content-type": "application/json" },
        JSON.stringify(report),
      );
      if (r.status !== 200) throw new Error(`report: ${r.status} ${r.text}`);
      tokens.push(token);
    },
  );
  return tokens;
}

/** Objects the runtime holds awake: three SQLite files open each (none for one asleep). */
const awake = (s: DirectServer) => {
  const k = s.openFileKinds();
  return k ? Math.round(k.sqlite / 3) : null;
};

async function asleep(subjects: Subject[]) {
  const start = Date.now();
  const bound = 8 + Math.floor(servers / 100);
  while (Date.now() - start < ASLEEP_WAIT_MS) {
    if (subjects.every((x) => (awake(x.server) ?? 0) <= bound)) break;
    await new Promise((r) => setTimeout(r, 1000));
  }
  return { waitedS: (Date.now() - start) / 1000, awake: subjects.map((x) => awake(x.server)) };
}

/** Every host polls once, CONCURRENCY at a time: runtime CPU and wall time, ms a poll. */
async function polls(x: Subject) {
  const c0 = x.server.cpuMs()!;
  const t0 = performance.now();
  await pool(x.tokens, CONCURRENCY, async (token) => {
    const r = await request(`${x.server.url}/v1/agent/desired`, "GET", {
      authorization: `Bearer ${token}`,
      "if-none-match": '"2"',
    });
    if (r.status !== 304) throw new Error(`${x.name}: poll ${r.status} ${r.text}`);
  });
  const wall = performance.now() - t0;
  return { cpu: (x.server.cpuMs()! - c0) / x.tokens.length, wall: wall / x.tokens.length };
}

const frame = (f: ProfileNode["callFrame"]) =>
  `${f.functionName || "(anonymous)"} ${f.url ? f.url.replace(/^.*\//, "") : ""}:${f.lineNumber + 1}`;

/** Self time by frame, and total time by function name anywhere on the stack (µs over the polls). */
function readProfile(profile: Profile, polls: number) {
  const byId = new Map(profile.nodes.map((n) => [n.id, n]));
  const parent = new Map<number, number>();
  for (const n of profile.nodes) for (const c of n.children ?? []) parent.set(c, n.id);
  const self = new Map<string, number>();
  const total = new Map<string, number>();
  let busy = 0;
  for (let i = 0; i < profile.samples.length; i++) {
    const dt = profile.timeDeltas[i + 1] ?? 0;
    const node = byId.get(profile.samples[i])!;
    const name = node.callFrame.functionName;
    if (name === "(idle)" || name === "(program)") continue;
    busy += dt;
    self.set(frame(node.callFrame), (self.get(frame(node.callFrame)) ?? 0) + dt);
    const seen = new Set<string>();
    for (let at: number | undefined = node.id; at !== undefined; at = parent.get(at)) {
      const n = byId.get(at)!.callFrame.functionName;
      if (n && !seen.has(n)) {
        seen.add(n);
        total.set(n, (total.get(n) ?? 0) + dt);
      }
    }
  }
  const per = (us: number) => (us / polls).toFixed(1);
  console.log(`\nthe isolate busy ${per(busy)} µs a poll (asleep phase, profiler on)`);
  console.log("\n| function (total: anywhere on the stack) | µs a poll |\n|---|---:|");
  const ours = [
    "ServerLedger",
    "assemble",
    "openLedger",
    "open",
    "load",
    "restoreHeartbeat",
    "arm",
    "earliest",
    "orphanedLease",
    "agentDesired",
    "fetch",
  ];
  for (const n of ours) console.log(`| ${n} | ${per(total.get(n) ?? 0)} |`);
  console.log("\n| frame (self time) | µs a poll |\n|---|---:|");
  for (const [k, v] of [...self].sort((a, b) => b[1] - a[1]).slice(0, 30)) console.log(`| ${k} | ${per(v)} |`);
}

const median = (a: number[]) => [...a].sort((p, q) => p - q)[Math.floor(a.length / 2)];

async function main() {
  const subjects: Subject[] = [];
  const inspectorPort = profiling ? await freePort() : undefined;
  try {
    if (beforeDir) {
      const before = (await import(resolve(beforeDir, "scripts/bench/direct-server.ts"))) as {
        startDirectServer: typeof startDirectServer;
      };
      const server = await before.startDirectServer({}, { stateParent });
      subjects.push({ name: "before", server, tokens: [] });
    }
    const server = await startDirectServer({}, { stateParent, inspectorPort });
    subjects.push({ name: beforeDir ? "after" : "this code", server, tokens: [] });
    await Promise.all(subjects.map(async (x) => (x.tokens = await fleetOf(x.server, servers))));
    const figures = new Map<string, { asleep: number[]; awake: number[]; asleepWall: number[]; awakeWall: number[] }>();
    for (let r = 0; r < rounds; r++) {
      const slept = await asleep(subjects);
      console.error(
        `round ${r + 1}: waited ${slept.waitedS.toFixed(0)} s for the ledgers to sleep (awake: ${slept.awake.join(", ")})`,
      );
      for (const x of r % 2 ? [...subjects].reverse() : subjects) {
        const profile =
          profiling && r === rounds - 1 && x === subjects.at(-1) ? await inspectorSession(inspectorPort!) : null;
        if (profile) {
          await profile.send("Profiler.enable");
          await profile.send("Profiler.setSamplingInterval", { interval: 50 });
          await profile.send("Profiler.start");
        }
        const cold = await polls(x);
        if (profile) {
          const { profile: p } = (await profile.send("Profiler.stop")) as { profile: Profile };
          profile.close();
          if (process.env.WAKE_PROFILE_OUT)
            writeFileSync(`${process.env.WAKE_PROFILE_OUT}-asleep.json`, JSON.stringify(p));
          readProfile(p, x.tokens.length);
        }
        if (profile && process.env.WAKE_PROFILE_OUT) {
          const again = await inspectorSession(inspectorPort!);
          await again.send("Profiler.enable");
          await again.send("Profiler.setSamplingInterval", { interval: 50 });
          await again.send("Profiler.start");
          const w = await polls(x);
          const { profile: p } = (await again.send("Profiler.stop")) as { profile: Profile };
          again.close();
          writeFileSync(`${process.env.WAKE_PROFILE_OUT}-awake.json`, JSON.stringify(p));
          console.error(`  (awake, profiled: ${w.cpu.toFixed(3)} ms CPU a poll)`);
        }
        const warm = await polls(x);
        const f = figures.get(x.name) ?? { asleep: [], awake: [], asleepWall: [], awakeWall: [] };
        f.asleep.push(cold.cpu);
        f.awake.push(warm.cpu);
        f.asleepWall.push(cold.wall);
        f.awakeWall.push(warm.wall);
        figures.set(x.name, f);
        console.error(
          `  ${x.name}: asleep ${cold.cpu.toFixed(3)} ms CPU (${cold.wall.toFixed(3)} ms wall), awake ${warm.cpu.toFixed(3)} ms CPU (${warm.wall.toFixed(3)} ms wall) a poll`,
        );
      }
    }
    console.log(
      `\n| ${rounds} rounds, ${servers} ledgers | runtime CPU a poll, ledger asleep | awake | the wake (CPU) | wall a poll, asleep / awake (${CONCURRENCY} at once) |`,
    );
    console.log("|---|---:|---:|---:|---:|");
    for (const [name, f] of figures) {
      const wake = f.asleep.map((a, i) => a - f.awake[i]);
      console.log(
        `| ${name} | ${median(f.asleep).toFixed(3)} (${Math.min(...f.asleep).toFixed(3)}–${Math.max(...f.asleep).toFixed(3)}) ms | ` +
          `${median(f.awake).toFixed(3)} ms | ${median(wake).toFixed(3)} (${Math.min(...wake).toFixed(3)}–${Math.max(...wake).toFixed(3)}) ms | ` +
          `${median(f.asleepWall).toFixed(3)} / ${median(f.awakeWall).toFixed(3)} ms |`,
      );
    }
  } finally {
    await Promise.all(subjects.map((x) => x.server.stop()));
    agent.destroy();
  }
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
