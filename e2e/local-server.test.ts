/**
 * The private local server (scripts/local-server.ts) that the benchmark, the crash check and these
 * tests start: its settings are its own whatever the caller exported, and the local entry (the
 * cost meter's) is there only when asked for.
 */
import { execFile } from "node:child_process";
import { existsSync, readdirSync, readFileSync } from "node:fs";
import { resolve } from "node:path";
import { promisify } from "node:util";
import { afterAll, describe, expect, inject, it } from "vitest";
import { startLocalServer, type LocalServer } from "../scripts/local-server.ts";

/** Whether a process of the group still runs (a zombie waiting for its reaper does not). */
const alive = (group: number) =>
  readdirSync("/proc")
    .filter((d) => /^\d+$/.test(d))
    .some((d) => {
      try {
        // pid (comm) state ppid pgrp …: comm may hold spaces, so read after its last ")".
        const [state, , pgrp] = readFileSync(`/proc/${d}/stat`, "utf8").split(")").pop()!.trim().split(" ");
        return Number(pgrp) === group && state !== "Z";
      } catch {
        return false; // gone while listed
      }
    });

const servers: LocalServer[] = [];
afterAll(() => servers.forEach((s) => s.stop()));

const fleets = (base: string, token: string) =>
  fetch(`${base}/v1/fleets`, { headers: { Authorization: `Bearer ${token}` } });

describe("a private local server", () => {
  it("answers to the admin token it wrote for itself, not to an ADMIN_TOKEN the caller exported", async () => {
    const exported = process.env.ADMIN_TOKEN;
    process.env.ADMIN_TOKEN = "the-callers-own-admin-token";
    try {
      const server = await startLocalServer({ label: "e2e-env", metered: true });
      servers.push(server);
      expect(server.admin).not.toBe(process.env.ADMIN_TOKEN);
      expect((await fleets(server.url, server.admin)).status).toBe(200);
      expect((await fleets(server.url, process.env.ADMIN_TOKEN)).status).toBe(401);
      // Asked for the local entry: the meter's routes are there.
      expect((await fetch(`${server.url}/__local/meter`)).status).toBe(200);
    } finally {
      if (exported === undefined) delete process.env.ADMIN_TOKEN;
      else process.env.ADMIN_TOKEN = exported;
    }
    // A second wrangler dev beside the suite's own: on a loaded machine its start alone took over
    // the suite's 60 s (as the other suites that start one allow 180 s in their setup).
  }, 180_000);

  it("goes with the process that started it when that process exits without stopping it", async () => {
    // As a test runner's worker exits after a setup hook timed out while its server was starting.
    const module = resolve(import.meta.dirname, "../scripts/local-server.ts");
    const script = `import { startLocalServer } from ${JSON.stringify(module)};
      const s = await startLocalServer({ label: "e2e-orphan" });
      console.log(JSON.stringify({ pid: s.pid, persist: s.persist }));
      process.exit(0);`;
    const { stdout } = await promisify(execFile)(process.execPath, ["--input-type=module", "-e", script], {
      timeout: 170_000,
    });
    const { pid, persist } = JSON.parse(stdout.trim().split("\n").pop()!) as { pid: number; persist: string };
    // SIGKILL is delivered at once; give the kernel a moment to reap the group.
    for (let i = 0; i < 50 && alive(pid); i++) await new Promise((r) => setTimeout(r, 100));
    const survived = alive(pid);
    if (survived) process.kill(-pid, "SIGKILL");
    expect(survived).toBe(false);
    expect(existsSync(persist)).toBe(false);
  }, 180_000);

  it("runs the deployed entry unless asked for the metered one: no local routes", async () => {
    const res = await fetch(`${inject("hmUrl")}/__local/meter`);
    expect(res.status).toBe(404);
    await res.arrayBuffer();
  });
});
