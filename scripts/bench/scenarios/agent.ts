// harbormaster-agent on a host: the executable's size, its idle resident memory on the host
// channel (goal ≤ 60 MB), and its CPU per idle hour (goal ≤ 1 s), measured from /proc over
// `--agent-idle` seconds (default 180: /proc counts 10 ms ticks, and a shorter window is mostly
// rounding) and scaled to the hour; then, where podman runs, how long
// from a desired change (the PUT's answer) to the new container running (podman's word, polled
// every 100 ms) and to the server showing it realized, for a small busybox image: the first
// install and an update to another image. The executable is built
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

/** The process's own CPU ticks (user + system), and those of its children that ended (podman runs). */
function procCpuTicks(pid: number): { self: number; children: number } {
  const text = readFileSync(`/proc/${pid}/stat`, "utf8");
  const fields = text.slice(text.lastIndexOf(")") + 2).split(" ");
  return { self: Number(fields[11]) + Number(fields[12]), children: Number(fields[13]) + Number(fields[14]) };
}

function procRssMb(pid: number): number {
  const kb = Number(/VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, "utf8"))?.[1] ?? NaN);
  return kb / 1024;
}

export async function run(ctx: BenchContext) {
  const idleS = Number(ctx.option("agent-idle") ?? 180);
  const work = mkdtempSync(join(tmpdir(), "hm-bench-agent-"));
  try {
    const executable =
      process.env.HARBORMASTER_AGENT_EXECUTABLE ??
      (await buildAgent({ outDir: join(work, "build"), deb: false, log: () => {} })).binary;
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
      JSON.stringify({
        url: ctx.base,
        server_id: server.id,
        fleet,
        hostname: server.hostname,
        token: server.token,
        reboot_group: "default",
        fleetlock_id: null,
        machine_id: "bench",
        joined_at: new Date().toISOString(),
      }),
      { mode: 0o600 },
    );
    writeFileSync(join(work, "boot_id"), "bench-boot\n");
    writeFileSync(join(work, "none.yaml"), "{}\n");
    const child = spawn(executable, ["run", "--state-dir", state], {
      // This machine's podman settings (runc, no default ulimits), as the agent suite sets them.
      env: {
        CONTAINERS_CONF: join(import.meta.dirname, "../../../agent/test/containers.conf"),
        ...process.env,
        HARBORMASTER_AGENT_BOOT_ID_FILE: join(work, "boot_id"),
        HARBORMASTER_AGENT_CONFIG: join(work, "none.yaml"),
        HARBORMASTER_AGENT_REBOOT_REQUIRED_FILE: join(work, "no-reboot"),
      },
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
        if (Date.now() > deadline || child.exitCode !== null)
          throw new Error(`the agent did not connect and report:\n${log}`);
        await new Promise((r) => setTimeout(r, 250));
      }
      await new Promise((r) => setTimeout(r, 5_000));
      const t0 = procCpuTicks(child.pid!);
      const started = Date.now();
      await new Promise((r) => setTimeout(r, idleS * 1000));
      const t1 = procCpuTicks(child.pid!);
      const cpuS = (t1.self - t0.self) / TICK_HZ;
      const childrenS = (t1.children - t0.children) / TICK_HZ;
      const windowS = (Date.now() - started) / 1000;
      ctx.note("agent: idle RSS on the channel (MB, goal ≤ 60)", procRssMb(child.pid!).toFixed(1));
      // /proc counts CPU in clock ticks: no tick used in the window reads as "under one tick's worth".
      const perHour = (cpuS * 3600) / windowS;
      const tickPerHour = (3600 / TICK_HZ / windowS).toFixed(2);
      ctx.note(
        `agent: CPU per idle hour (s, goal ≤ 1; ${Math.round(windowS)} s measured, ${cpuS.toFixed(2)} s used)`,
        cpuS === 0 ? `< ${tickPerHour}` : perHour.toFixed(2),
      );
      // What the engine's commands it runs (a `podman ps` a heartbeat) cost on top, per idle hour.
      ctx.note("agent: its podman commands' CPU per idle hour (s)", ((childrenS * 3600) / windowS).toFixed(2));
      if (spawnSync("podman", ["--version"]).status === 0) await changeToRunning(ctx, api, String(server.id), work);
      else ctx.note("agent: desired change to container running", "skipped: no podman here");
    } finally {
      child.kill("SIGTERM");
      await new Promise((r) => (child.exitCode !== null ? r(null) : child.on("close", r)));
    }
  } finally {
    rmSync(work, { recursive: true, force: true });
  }
}

type Api = (method: string, path: string, body?: unknown) => Promise<Record<string, unknown>>;

function podman(...args: string[]) {
  const r = spawnSync("podman", args, {
    encoding: "utf8",
    env: { CONTAINERS_CONF: join(import.meta.dirname, "../../../agent/test/containers.conf"), ...process.env },
  });
  if (r.status !== 0) throw new Error(`podman ${args.join(" ")}: ${r.stderr}`);
  return r.stdout;
}

/** A small image in podman's store from Debian's busybox-static (no registry here). */
function busyboxImage(ref: string, work: string) {
  const root = join(work, `rootfs-${ref.replace(/\W/g, "-")}`);
  mkdirSync(join(root, "bin"), { recursive: true });
  writeFileSync(join(root, "bin/busybox"), readFileSync("/bin/busybox"), { mode: 0o755 });
  for (const applet of ["sh", "sleep"]) spawnSync("ln", ["-s", "busybox", join(root, "bin", applet)]);
  const tar = `${root}.tar`;
  spawnSync("tar", ["-C", root, "-cf", tar, "."]);
  // Stops when asked (a bare `sleep` as PID 1 ignores SIGTERM, and every update would wait out
  // the 10 s stop timeout before the kill).
  podman("import", "--change", `CMD ["/bin/sh","-c","trap 'exit 0' TERM; sleep 1000000 & wait"]`, tar, ref);
}

async function changeToRunning(ctx: BenchContext, api: Api, serverId: string, work: string) {
  const tag = `hm-bench-${Date.now().toString(36)}`;
  const refs = [`localhost/${tag}:1`, `localhost/${tag}:2`];
  for (const r of refs) busyboxImage(r, work);
  try {
    let generation = (await api("GET", `/v1/servers/${serverId}/desired`)).generation as number;
    for (const [i, ref] of refs.entries()) {
      const t0 = Date.now();
      await api("PUT", `/v1/servers/${serverId}/desired`, {
        generation: ++generation,
        agents: [
          { name: "bench", image: ref, version: String(i + 1), instance_id: "00000000-0000-4000-8000-000000000001" },
        ],
      });
      let running: number | null = null;
      let realized: number | null = null;
      while ((running === null || realized === null) && Date.now() - t0 < 120_000) {
        if (running === null) {
          const ps = JSON.parse(
            podman(
              "ps",
              "--filter",
              "label=io.harbormaster.agent=bench",
              "--filter",
              `label=io.harbormaster.version=${i + 1}`,
              "--format",
              "json",
            ) || "[]",
          ) as unknown[];
          if (ps.length) running = Date.now() - t0;
        }
        if (realized === null) {
          const v = await api("GET", `/v1/servers/${serverId}`);
          if (v.status === "realized" && v.reported_generation === generation) realized = Date.now() - t0;
        }
        await new Promise((r) => setTimeout(r, 100));
      }
      const what = i === 0 ? "install" : "update";
      ctx.note(`agent: desired change to container running (${what}, ms)`, running ?? "timed out");
      ctx.note(`agent: desired change to server realized (${what}, ms)`, realized ?? "timed out");
    }
  } finally {
    for (const c of podman("ps", "-a", "-q", "--filter", "label=io.harbormaster.agent=bench")
      .split("\n")
      .filter(Boolean))
      spawnSync("podman", ["rm", "-f", "-v", c]);
    for (const r of refs) spawnSync("podman", ["rmi", "-f", r]);
  }
}
