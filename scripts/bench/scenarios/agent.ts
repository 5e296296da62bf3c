// harbormaster-agent on a host: the executable's size, its idle resident memory on the host
// channel (goal ≤ 60 MB), and its CPU per idle hour (goal ≤ 1 s), measured from /proc over
// `--agent-idle` seconds (default 60) and scaled to the hour. The executable is built
// (scripts/agent/build.ts, no .deb) unless HARBORMASTER_AGENT_EXECUTABLE names one; it runs as a
// process against the benchmark's server, registered as a server of its own, with a state
// directory in a temp dir, as systemd would run it.
import { spawn, spawnSync } from "node:child_process";
import { mkdirSync, mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { buildAgent } from "../../agent/build.ts";
import type { BenchContext } from "../run.ts";

const TICK_HZ = Number(spawnSync("getconf", ["CLK_TCK"], { encoding: "utf8" }).stdout.trim()) || 100;

function readStatus(path: string): { connected?: boolean; last_report?: { at: string } | null } {
  try {
    return JSON.parse(readFileSync(path, "utf8"));
  } catch {
    return {};
  }
}

function procCpuTicks(pid: number): number {
  const text = readFileSync(`/proc/${pid}/stat`, "utf8");
  const fields = text.slice(text.lastIndexOf(")") + 2).split(" ");
  return Number(fields[11]) + Number(fields[12]);
}

function procRssMb(pid: number): number {
  const kb = Number(/VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, "utf8"))?.[1] ?? NaN);
  return kb / 1024;
}

export async function run(ctx: BenchContext) {
  const idleS = Number(ctx.option("agent-idle") ?? 60);
  const work = mkdtempSync(join(tmpdir(), "hm-bench-agent-"));
  try {
    const executable = process.env.HARBORMASTER_AGENT_EXECUTABLE ?? (await buildAgent({ outDir: join(work, "build"), deb: false, log: () => {} })).binary;
    ctx.note("agent: executable size (MB)", (statSync(executable).size / 2 ** 20).toFixed(1));

    const api = async (method: string, path: string, body?: unknown) => {
      const res = await fetch(`${ctx.base}${path}`, {
        method,
        headers: { authorization: `Bearer ${ctx.admin}`, "content-type": "application/json" },
        body: body === undefined ? undefined : JSON.stringify(body),
      });
      const json = (await res.json().catch(() => null)) as Record<string, unknown> | null;
      if (!res.ok) throw new Error(`${method} ${path}: ${res.status} ${JSON.stringify(json)}`);
      return json!;
    };
    const fleet = `bench-agent-${Date.now().toString(36)}`;
    await api("POST", "/v1/fleets", { id: fleet });
    const server = await api("POST", "/v1/servers", { fleet, hostname: "agent-1.bench.example" });
    const state = join(work, "state");
    mkdirSync(state, { mode: 0o700 });
    // The identity `join` would have kept: the bench measures the loop, not the enrollment.
    writeFileSync(
      join(state, "identity.json"),
      JSON.stringify({ url: ctx.base, server_id: server.id, fleet, hostname: server.hostname, token: server.token, reboot_group: "default", fleetlock_id: null, machine_id: "bench", joined_at: new Date().toISOString() }),
      { mode: 0o600 },
    );
    writeFileSync(join(work, "boot_id"), "bench-boot\n");
    writeFileSync(join(work, "none.yaml"), "{}\n");
    const child = spawn(executable, ["run", "--state-dir", state], {
      env: { ...process.env, HARBORMASTER_AGENT_BOOT_ID_FILE: join(work, "boot_id"), HARBORMASTER_AGENT_CONFIG: join(work, "none.yaml"), HARBORMASTER_AGENT_REBOOT_REQUIRED_FILE: join(work, "no-reboot") },
      stdio: ["ignore", "ignore", "pipe"],
    });
    let log = "";
    child.stderr.on("data", (d: Buffer) => (log = (log + d.toString()).slice(-4000)));
    try {
      // Connected and reported once, then left alone: what an idle host costs.
      const deadline = Date.now() + 60_000;
      for (;;) {
        const s = readStatus(join(state, "status.json"));
        if (s.connected && s.last_report?.at) break;
        if (Date.now() > deadline || child.exitCode !== null) throw new Error(`the agent did not connect and report:\n${log}`);
        await new Promise((r) => setTimeout(r, 250));
      }
      await new Promise((r) => setTimeout(r, 5_000));
      const t0 = procCpuTicks(child.pid!);
      const started = Date.now();
      await new Promise((r) => setTimeout(r, idleS * 1000));
      const cpuS = (procCpuTicks(child.pid!) - t0) / TICK_HZ;
      const windowS = (Date.now() - started) / 1000;
      ctx.note("agent: idle RSS on the channel (MB, goal ≤ 60)", procRssMb(child.pid!).toFixed(1));
      // /proc counts CPU in clock ticks: no tick used in the window reads as "under one tick's worth".
      const perHour = (cpuS * 3600) / windowS;
      const tickPerHour = (3600 / TICK_HZ / windowS).toFixed(2);
      ctx.note(`agent: CPU per idle hour (s, goal ≤ 1; ${Math.round(windowS)} s measured, ${cpuS.toFixed(2)} s used)`, cpuS === 0 ? `< ${tickPerHour}` : perHour.toFixed(2));
    } finally {
      child.kill("SIGTERM");
      await new Promise((r) => (child.exitCode !== null ? r(null) : child.on("close", r)));
    }
  } finally {
    rmSync(work, { recursive: true, force: true });
  }
}
