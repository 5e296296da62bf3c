#!/usr/bin/env node
/**
 * `npm run sim:calibrate -- --servers 1000 --duration 20`: the simulator's own cost. Its hosts
 * (the reference agent, the in-memory driver, Node's fetch) run against sim/fake-server.ts in a
 * child process, which answers at once; this process's CPU time divided by the host operations
 * it completed is what one host operation costs the simulator, to set against benchmark figures.
 */
import { spawn } from "node:child_process";
import { resolve } from "node:path";
import { performance } from "node:perf_hooks";
import { createInterface } from "node:readline";
import { Command } from "commander";
import { HostAgent } from "../agent/agent.ts";
import { MemoryDriver } from "../agent/memory-driver.ts";

const program = new Command("sim:calibrate")
  .option("--servers <n>", "hosts", Number, 1000)
  .option("--duration <s>", "seconds of load", Number, 20)
  .option("--heartbeat <s>", "report interval per host (short, to make many operations)", Number, 1)
  .parse();
const o = program.opts<{ servers: number; duration: number; heartbeat: number }>();

const child = spawn(process.execPath, [resolve(import.meta.dirname, "fake-server.ts")], {
  stdio: ["ignore", "pipe", "inherit"],
});
const port = await new Promise<number>((res) =>
  createInterface({ input: child.stdout! }).once("line", (l) => res(JSON.parse(l).port)),
);
const url = `http://127.0.0.1:${port}`;

const stop = new AbortController();
let ops = 0;
let errors = 0;
const loops: Promise<unknown>[] = [];
// Warm-up: a few hosts for a second, so JIT compilation falls outside the measurement.
{
  const warm = new AbortController();
  const w = Array.from({ length: 20 }, (_, i) =>
    new HostAgent({
      url,
      token: `t${i}`,
      driver: new MemoryDriver(),
      bootId: "w",
      transport: "http",
      waitS: 0,
      reportIntervalMs: 100,
    }).run(warm.signal),
  );
  await new Promise((r) => setTimeout(r, 1500));
  warm.abort();
  await Promise.all(w);
}
const cpu0 = process.cpuUsage();
const elu0 = performance.eventLoopUtilization();
const t0 = performance.now();
for (let i = 0; i < o.servers; i++) {
  const agent = new HostAgent({
    url,
    token: `token-${i}`,
    driver: new MemoryDriver(),
    bootId: `boot-${i}`,
    // The fake server speaks HTTP only, and does not park: a poll is one request, then the host waits out its heartbeat.
    transport: "http",
    waitS: 0,
    reportIntervalMs: o.heartbeat * 1000,
    minPollIntervalMs: o.heartbeat * 1000,
    onEvent: (e) => {
      if (e.type === "desired" || e.type === "reported") ops++;
      else if (e.type === "error") errors++;
    },
    sleep: (ms, signal) =>
      new Promise((r) => {
        const t = setTimeout(r, ms);
        signal?.addEventListener("abort", () => (clearTimeout(t), r()));
      }),
  });
  loops.push(agent.run(stop.signal));
}
await new Promise((r) => setTimeout(r, o.duration * 1000));
stop.abort();
await Promise.all(loops);
const cpu = process.cpuUsage(cpu0);
const elu = performance.eventLoopUtilization(elu0);
const seconds = (performance.now() - t0) / 1000;
child.kill("SIGTERM");
const cpuMs = (cpu.user + cpu.system) / 1000;
console.log(
  JSON.stringify(
    {
      servers: o.servers,
      seconds: Math.round(seconds * 10) / 10,
      host_operations: ops,
      errors,
      operations_per_s: Math.round(ops / seconds),
      cpu_us_per_op: Math.round((cpuMs * 1000) / ops),
      cpu_share_of_one_core: Math.round((cpuMs / 1000 / seconds) * 100) / 100,
      event_loop_utilization: Math.round(elu.utilization * 100) / 100,
    },
    null,
    2,
  ),
);
