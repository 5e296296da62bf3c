/**
 * systemd restarts a crashed agent every 5 s, for ever (its growing restart delay needs systemd
 * 254): the agent backs off by itself. Here the test is systemd: it runs the real
 * `harbormaster-agent run`, kills it with SIGKILL once it has called the server (a crash), and
 * starts it again at once; each start after a crash waits longer before its first call, up to
 * the cap, and a clean stop or a new boot starts over.
 */
import { spawn, type ChildProcess } from "node:child_process";
import { existsSync, mkdirSync, writeFileSync } from "node:fs";
import { join, resolve } from "node:path";
import { afterAll, afterEach, describe, expect, it } from "vitest";
import { crashDelayMs, crashesBefore } from "../cli/crash-backoff.ts";
import { json, scriptedServer, tempHost } from "./cli-helpers.ts";

const repoRoot = resolve(import.meta.dirname, "../..");
const NODE = join(repoRoot, "node_modules/node/bin/node");
const MAIN = join(repoRoot, "agent/cli/main.ts");

const server = await scriptedServer((req, res) => {
  if (req.url.startsWith("/v1/agent/desired"))
    return json(res, 200, { server_id: "s", generation: 1, lifecycle: "run", agents: [] });
  if (req.url === "/v1/agent/inventory")
    return json(res, 200, { server_id: "s", desired_generation: 1, status: "realized", agents: [] });
  json(res, 404, { error: { code: "not_found", message: "no" } });
});
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

/** One start of the agent, as systemd's ExecStart: resolves once it called the server. */
async function start() {
  const before = server.requests.length;
  const child = spawn(NODE, [MAIN, "run"], {
    env: {
      ...process.env,
      ...host.env,
      HARBORMASTER_AGENT_TRANSPORT: "http",
      HARBORMASTER_AGENT_ENGINE: join(host.root, "no-such-engine"),
      HARBORMASTER_AGENT_TARBALL_ROOT: host.root,
      HARBORMASTER_AGENT_CRASH_BACKOFF_BASE_S: "1",
      HARBORMASTER_AGENT_CRASH_BACKOFF_CAP_S: "4",
    },
    stdio: ["ignore", "ignore", "pipe"],
  });
  running = child;
  let log = "";
  child.stderr!.on("data", (d: Buffer) => (log += d));
  const exited = new Promise<number | null>((ok) => child.on("exit", (code) => ok(code)));
  const t0 = Date.now();
  // The wait it announced (none after a clean run), read from its log once it called the server.
  const deadline = t0 + 30_000;
  while (server.requests.length === before) {
    if (Date.now() > deadline) throw new Error(`no call within 30 s; its log:\n${log}`);
    await new Promise((r) => setTimeout(r, 25));
  }
  const calledAfterMs = Date.now() - t0;
  const m = /the last run crashed; waiting before connecting crashes_in_a_row=(\d+) wait_s=([\d.]+)/.exec(log);
  return {
    child,
    calledAfterMs,
    crashes: m ? Number(m[1]) : 0,
    waitMs: m ? Number(m[2]) * 1000 : 0,
    exited,
    log: () => log,
  };
}

describe("an agent that crashes again and again", () => {
  it("waits longer before connecting after each crash in a row, up to the cap; a clean stop or a reboot starts over", async () => {
    const seen: { crashes: number; waitMs: number; calledAfterMs: number }[] = [];
    // Five starts, each killed (kill -9: no chance to clean up) once it called the server.
    for (let i = 0; i < 5; i++) {
      const run = await start();
      seen.push({ crashes: run.crashes, waitMs: run.waitMs, calledAfterMs: run.calledAfterMs });
      run.child.kill("SIGKILL");
      await run.exited;
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

  it("stops at once when told to during its wait, and starts over after", async () => {
    const first = await start();
    first.child.kill("SIGKILL");
    await first.exited;
    const second = await start();
    second.child.kill("SIGKILL");
    await second.exited;
    // The third start waits (30-60 s here): a SIGTERM then ends it at once, as a clean stop.
    const third = spawn(NODE, [MAIN, "run"], {
      env: {
        ...process.env,
        ...host.env,
        HARBORMASTER_AGENT_TRANSPORT: "http",
        HARBORMASTER_AGENT_ENGINE: join(host.root, "no-such-engine"),
        HARBORMASTER_AGENT_TARBALL_ROOT: host.root,
        HARBORMASTER_AGENT_CRASH_BACKOFF_BASE_S: "60",
        HARBORMASTER_AGENT_CRASH_BACKOFF_CAP_S: "60",
      },
      stdio: ["ignore", "ignore", "pipe"],
    });
    running = third;
    let log = "";
    third.stderr!.on("data", (d: Buffer) => (log += d));
    const exited = new Promise<number | null>((ok) => third.on("exit", (code) => ok(code)));
    const t = Date.now();
    while (!/waiting before connecting/.test(log) && Date.now() - t < 30_000)
      await new Promise((r) => setTimeout(r, 25));
    const calls = server.requests.length;
    const t0 = Date.now();
    third.kill("SIGTERM");
    expect(await exited).toBe(0);
    expect(Date.now() - t0).toBeLessThan(5_000);
    expect(server.requests.length).toBe(calls);
    expect(existsSync(join(host.stateDir, "run.json"))).toBe(false);
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

  it("waits none after none, then doubles from the base to the cap, jittered in its second half", () => {
    expect(crashDelayMs(0, policy, () => 1)).toBe(0);
    expect([1, 2, 3, 4, 5, 6, 7, 60].map((n) => crashDelayMs(n, policy, () => 1))).toEqual([
      10_000, 20_000, 40_000, 80_000, 160_000, 300_000, 300_000, 300_000,
    ]);
    expect(crashDelayMs(1, policy, () => 0)).toBe(5_000);
  });
});
