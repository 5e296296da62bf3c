/**
 * systemd restarts a crashed agent 5 s later, and only from systemd 254 later with each crash in a
 * row: the agent backs off by itself. Here the test is systemd: it runs the real
 * `harbormaster-agent run`, kills it with SIGKILL once it has called the server (a crash), and
 * starts it again at once; each start after a crash waits longer before its first call, up to
 * the cap, and a clean stop or a new boot starts over.
 */
import { spawn, type ChildProcess } from "node:child_process";
import { existsSync, mkdirSync, writeFileSync } from "node:fs";
import { join, resolve } from "node:path";
import { afterAll, afterEach, describe, expect, it } from "vitest";
import { crashDelayMs, crashesBefore, startRun } from "../cli/crash-backoff.ts";
import { createLogger } from "../cli/log.ts";
import { StateDir } from "../cli/state.ts";
import { agentCmd, emptyServer, tempHost } from "./cli-helpers.ts";

const repoRoot = resolve(import.meta.dirname, "../..");
const NODE = join(repoRoot, "node_modules/node/bin/node");
const MAIN = join(repoRoot, "agent/cli/main.ts");

const server = await emptyServer();
afterAll(() => server.close());

let running: ChildProcess | null = null;
afterEach(() => {
  if (running && running.exitCode === null && running.signalCode === null) running.kill("SIGKILL");
  running = null;
});

const host = tempHost("hm-crash-loop");
mkdirSync(host.stateDir, { recursive: true, mode: 0o700 });
writeFileSync(
  join(host.stateDir, "identity.json"),
  JSON.stringify({
    url: server.url,
    server_id: "s",
    fleet: "f",
    hostname: "h",
    token: "hms.s.t",
    reboot_group: "default",
    fleetlock_id: null,
    machine_id: "m",
    joined_at: "",
  }),
);

/** One start of the agent, as systemd's ExecStart, its crash backoff shortened to these seconds. */
function spawnAgent(backoff = { base_s: 1, cap_s: 4 }) {
  const child = spawn(NODE, [MAIN, "run"], {
    env: {
      ...process.env,
      ...host.env,
      HARBORMASTER_AGENT_TRANSPORT: "http",
      HARBORMASTER_AGENT_ENGINE: join(host.root, "no-such-engine"),
      HARBORMASTER_AGENT_TARBALL_ROOT: host.root,
      HARBORMASTER_AGENT_CRASH_BACKOFF_BASE_S: String(backoff.base_s),
      HARBORMASTER_AGENT_CRASH_BACKOFF_CAP_S: String(backoff.cap_s),
    },
    stdio: ["ignore", "ignore", "pipe"],
  });
  running = child;
  let log = "";
  child.stderr!.on("data", (d: Buffer) => (log += d));
  const exited = new Promise<number | null>((ok) => child.on("exit", (code) => ok(code)));
  const waitForLog = async (re: RegExp) => {
    const deadline = Date.now() + 30_000;
    while (!re.test(log)) {
      if (Date.now() > deadline) throw new Error(`no ${re} within 30 s; its log:\n${log}`);
      await new Promise((r) => setTimeout(r, 25));
    }
  };
  return { child, exited, log: () => log, waitForLog };
}

/** A start that resolves once it called the server, with the wait it announced (none after a clean run). */
async function start() {
  const before = server.requests.length;
  const t0 = Date.now();
  const agent = spawnAgent();
  const deadline = t0 + 30_000;
  while (server.requests.length === before) {
    if (Date.now() > deadline) throw new Error(`no call within 30 s; its log:\n${agent.log()}`);
    await new Promise((r) => setTimeout(r, 25));
  }
  const calledAfterMs = Date.now() - t0;
  const m = /the last run crashed; waiting before connecting crashes_in_a_row=(\d+) wait_s=([\d.]+)/.exec(agent.log());
  return { ...agent, calledAfterMs, crashes: m ? Number(m[1]) : 0, waitMs: m ? Number(m[2]) * 1000 : 0 };
}

/** A start killed as a crash is (kill -9: no chance to clean up) once it called the server. */
async function crash() {
  const run = await start();
  run.child.kill("SIGKILL");
  await run.exited;
  return run;
}

describe("an agent that crashes again and again", () => {
  it("waits longer before connecting after each crash in a row, up to the cap; a clean stop or a reboot starts over", async () => {
    const seen: { crashes: number; waitMs: number; calledAfterMs: number }[] = [];
    // Five starts, each killed (kill -9: no chance to clean up) once it called the server.
    for (let i = 0; i < 5; i++) {
      const run = await crash();
      seen.push({ crashes: run.crashes, waitMs: run.waitMs, calledAfterMs: run.calledAfterMs });
    }
    expect(seen.map((s) => s.crashes)).toEqual([0, 1, 2, 3, 4]);
    // 1 s, 2 s, 4 s, then the 4 s cap, each its second half jittered.
    const full = [0, 1_000, 2_000, 4_000, 4_000];
    seen.forEach((s, i) => {
      expect(s.waitMs).toBeGreaterThanOrEqual(full[i] / 2 - 100);
      expect(s.waitMs).toBeLessThanOrEqual(full[i]);
      // And it did wait that long before its first call.
      expect(s.calledAfterMs).toBeGreaterThanOrEqual(s.waitMs - 100);
    });

    // Stopped as systemd stops it (SIGTERM): the run ended as it should, the next start does not wait.
    const stopped = await start();
    expect(stopped.crashes).toBe(5);
    stopped.child.kill("SIGTERM");
    expect(await stopped.exited).toBe(0);
    expect(existsSync(join(host.stateDir, "run.json"))).toBe(false);
    const clean = await start();
    expect(clean.crashes).toBe(0);
    expect(clean.log()).not.toMatch(/the last run crashed/);

    // A crash, then a new boot (a power cut looks the same from here): no wait either.
    clean.child.kill("SIGKILL");
    await clean.exited;
    writeFileSync(host.bootId, "99999999-2222-3333-4444-555555555555\n");
    const rebooted = await start();
    expect(rebooted.crashes).toBe(0);
    rebooted.child.kill("SIGTERM");
    expect(await rebooted.exited).toBe(0);
  });

  it("says in its status that it backs off, until when and after how many crashes, and stops at once when told to", async () => {
    await crash();
    await crash();
    // The third start waits (30-60 s here).
    const t = Date.now();
    const third = spawnAgent({ base_s: 60, cap_s: 60 });
    await third.waitForLog(/waiting before connecting/);
    const shown = await agentCmd(["status"], host.env);
    expect(shown.code, shown.stderr).toBe(0);
    const line = /^loop: +backing off until (\S+) after 2 crashes in a row \(pid (\d+),/m.exec(shown.stdout);
    expect(line, shown.stdout).not.toBeNull();
    expect(Number(line![2])).toBe(third.child.pid);
    const until = Date.parse(line![1]);
    expect(until).toBeGreaterThanOrEqual(t + 30_000 - 1_000);
    expect(until).toBeLessThanOrEqual(Date.now() + 60_000);
    const asJson = await agentCmd(["status", "--json"], host.env);
    expect(JSON.parse(asJson.stdout)).toMatchObject({
      running: true,
      loop: { pid: third.child.pid, crash_backoff: { until: line![1], crashes: 2 }, exited: null },
    });

    // A SIGTERM during the wait ends it at once, as a clean stop: no call, no marker, and the
    // status says it stopped.
    const calls = server.requests.length;
    const t0 = Date.now();
    third.child.kill("SIGTERM");
    expect(await third.exited).toBe(0);
    expect(Date.now() - t0).toBeLessThan(5_000);
    expect(server.requests.length).toBe(calls);
    expect(existsSync(join(host.stateDir, "run.json"))).toBe(false);
    const after = await agentCmd(["status"], host.env);
    expect(after.stdout).toMatch(/^loop: +not running \(ended \S+: aborted\)$/m);
    expect(after.stdout).not.toMatch(/backing off/);

    // The next start is clean: no wait, and its status says it runs.
    const next = await start();
    expect(next.crashes).toBe(0);
    expect((await agentCmd(["status", "--json"], host.env)).stdout).toMatch(/"crash_backoff": null/);
    next.child.kill("SIGTERM");
    expect(await next.exited).toBe(0);
  });
});

describe("the crash count", () => {
  const policy = { base_s: 10, cap_s: 300, stable_s: 600 };
  const marker = (started_at: number, crashes: number, boot_id = "b") => ({ boot_id, started_at, crashes });

  it("counts a run that crashed soon after its start on top of the ones before", () => {
    expect(crashesBefore(null, "b", policy, 1_000_000)).toBe(0);
    expect(crashesBefore(marker(1_000_000 - 30_000, 0), "b", policy, 1_000_000)).toBe(1);
    expect(crashesBefore(marker(1_000_000 - 30_000, 3), "b", policy, 1_000_000)).toBe(4);
  });

  it("starts over after a run that stayed up, and after a reboot; never on a clock set back", () => {
    expect(crashesBefore(marker(1_000_000 - 600_000, 7), "b", policy, 1_000_000)).toBe(1);
    expect(crashesBefore(marker(1_000_000 - 30_000, 7, "other-boot"), "b", policy, 1_000_000)).toBe(0);
    expect(crashesBefore(marker(1_000_000 + 3_600_000, 2), "b", policy, 1_000_000)).toBe(3);
  });

  it("takes a marker it cannot read for one crash", () => {
    expect(crashesBefore("unreadable", "b", policy, 0)).toBe(1);
    expect(crashesBefore({ boot_id: "b", started_at: "x", crashes: 1 }, "b", policy, 0)).toBe(1);
  });

  it("counts a run's up-time from the end of its wait, so a cap longer than stable_s still grows", () => {
    const state = new StateDir(tempHost().stateDir);
    state.ensure();
    const log = createLogger({ write: () => {} });
    const long = { base_s: 400, cap_s: 900, stable_s: 600 };
    let now = 1_000_000;
    const starts = [startRun(state, "b", long, log, now, () => 1)];
    // Each run crashes 30 s after it connects, that is 30 s after its wait.
    for (let i = 0; i < 3; i++) {
      now += starts.at(-1)!.delayMs + 30_000;
      starts.push(startRun(state, "b", long, log, now, () => 1));
    }
    expect(starts.map((s) => [s.crashes, s.delayMs])).toEqual([
      [0, 0],
      [1, 400_000],
      [2, 800_000],
      [3, 900_000],
    ]);
    // A run up stable_s after its wait starts the count over.
    now += starts.at(-1)!.delayMs + 600_000;
    expect(startRun(state, "b", long, log, now, () => 1).crashes).toBe(1);
  });

  it("waits none after none, then doubles from the base to the cap, jittered in its second half", () => {
    expect(crashDelayMs(0, policy, () => 1)).toBe(0);
    expect([1, 2, 3, 4, 5, 6, 7, 60].map((n) => crashDelayMs(n, policy, () => 1))).toEqual([
      10_000, 20_000, 40_000, 80_000, 160_000, 300_000, 300_000, 300_000,
    ]);
    expect(crashDelayMs(1, policy, () => 0)).toBe(5_000);
  });
});
