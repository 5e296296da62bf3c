/**
 * The real-agent end-to-end suite's harness: a private server (scripts/local-server.ts, as the
 * e2e suite starts it), and the built harbormaster-agent run as a real process with its state
 * directory and configuration under a temp root, supervised as systemd's unit would
 * (Restart=on-failure, RestartPreventExitStatus=78).
 */
import { spawn, spawnSync, type ChildProcess } from "node:child_process";
import {
  chmodSync,
  copyFileSync,
  mkdirSync,
  mkdtempSync,
  readFileSync,
  rmSync,
  symlinkSync,
  writeFileSync,
} from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { stringify } from "yaml";
import type { StatusFile } from "../cli/state.ts";

export async function waitFor<T>(
  what: string,
  probe: () => Promise<T | null | undefined | false> | T | null | undefined | false,
  timeoutMs = 60_000,
  everyMs = 250,
): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  let last: unknown = null;
  for (;;) {
    try {
      const v = await probe();
      if (v) return v;
    } catch (err) {
      last = err;
    }
    if (Date.now() > deadline)
      throw new Error(`timed out waiting for ${what}${last ? `: ${(last as Error).message}` : ""}`);
    await new Promise((r) => setTimeout(r, everyMs));
  }
}

export interface Api {
  (method: string, path: string, body?: unknown, token?: string): Promise<{ status: number; json: any }>;
}

export function apiFor(url: string, admin: string): Api {
  return async (method, path, body, token) => {
    const res = await fetch(`${url}${path}`, {
      method,
      headers: {
        authorization: `Bearer ${token ?? admin}`,
        ...(body === undefined ? {} : { "content-type": "application/json" }),
      },
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    return { status: res.status, json: (await res.json().catch(() => null)) as any };
  };
}

export interface HostOptions {
  /** Settings written to the agent's config.yaml (merged over the harness's). */
  config?: Record<string, unknown>;
  env?: Record<string, string>;
}

/**
 * One host: a temp root holding the agent's executable (a copy: self-updates replace it), its
 * state directory, config.yaml, machine-id and boot_id.
 */
export class Host {
  readonly root: string;
  readonly binary: string;
  readonly stateDir: string;
  readonly configFile: string;
  readonly bootIdFile: string;
  readonly machineIdFile: string;
  readonly env: Record<string, string>;
  log = "";
  private child: ChildProcess | null = null;
  private supervising = false;
  exits: (number | null)[] = [];

  constructor(executable: string, opts: HostOptions = {}) {
    this.root = mkdtempSync(join(tmpdir(), "hm-e2e-host-"));
    mkdirSync(join(this.root, "usr/bin"), { recursive: true });
    this.binary = join(this.root, "usr/bin/harbormaster-agent");
    copyFileSync(executable, this.binary);
    this.stateDir = join(this.root, "var/lib/harbormaster-agent");
    this.configFile = join(this.root, "etc/harbormaster-agent/config.yaml");
    this.bootIdFile = join(this.root, "boot_id");
    this.machineIdFile = join(this.root, "etc/machine-id");
    mkdirSync(join(this.root, "etc/harbormaster-agent"), { recursive: true });
    writeFileSync(
      this.machineIdFile,
      `${Math.random().toString(16).slice(2).padEnd(16, "0")}${Date.now().toString(16).padStart(16, "0")}\n`,
    );
    writeFileSync(this.bootIdFile, "boot-1\n");
    this.writeConfig(opts.config ?? {});
    this.env = { ...opts.env };
  }

  writeConfig(extra: Record<string, unknown>) {
    const base = {
      state_dir: this.stateDir,
      machine_id_file: this.machineIdFile,
      boot_id_file: this.bootIdFile,
      report_interval_s: 2,
      log_level: "debug",
      reboot: { required_file: join(this.root, "run/reboot-required"), check_interval_s: 1 },
      self_update: { binary: this.binary, start_timeout_s: 60 },
    };
    const merged: Record<string, unknown> = { ...base };
    for (const [k, v] of Object.entries(extra)) {
      merged[k] =
        typeof v === "object" && v !== null && !Array.isArray(v)
          ? { ...((base as Record<string, unknown>)[k] as object), ...v }
          : v;
    }
    writeFileSync(this.configFile, stringify(merged));
  }

  /** Runs a command of the agent to completion. */
  cmd(args: string[], input?: string): Promise<{ code: number | null; stdout: string; stderr: string }> {
    return new Promise((resolve) => {
      const child = spawn(this.binary, [...args, "--config", this.configFile], {
        env: { ...process.env, ...this.env },
        stdio: ["pipe", "pipe", "pipe"],
      });
      let stdout = "";
      let stderr = "";
      child.stdout.on("data", (d: Buffer) => (stdout += d));
      child.stderr.on("data", (d: Buffer) => (stderr += d));
      child.stdin.end(input ?? "");
      child.on("close", (code) => resolve({ code, stdout, stderr }));
    });
  }

  /** `run`, supervised as the unit does: started again after any exit but 0 and 78. */
  start() {
    this.supervising = true;
    const launch = () => {
      const child = spawn(this.binary, ["run", "--config", this.configFile], {
        env: { ...process.env, ...this.env },
        stdio: ["ignore", "ignore", "pipe"],
      });
      this.child = child;
      child.stderr!.on("data", (d: Buffer) => (this.log += d));
      child.on("close", (code) => {
        this.exits.push(code);
        this.log += `--- exit ${code}\n`;
        if (this.child === child) this.child = null;
        if (this.supervising && code !== 0 && code !== 78)
          setTimeout(() => this.supervising && !this.child && launch(), 300);
      });
    };
    launch();
  }

  get pid(): number | null {
    return this.child?.pid ?? null;
  }

  get running(): boolean {
    return this.child !== null;
  }

  /** What the running loop last wrote for `status`. */
  status(): StatusFile | null {
    try {
      return JSON.parse(readFileSync(join(this.stateDir, "status.json"), "utf8")) as StatusFile;
    } catch {
      return null;
    }
  }

  /** SIGTERM, as `systemctl stop` sends; resolves once the process is gone. */
  async stop() {
    this.supervising = false;
    const child = this.child;
    if (!child) return;
    const gone = new Promise((r) => child.once("close", r));
    child.kill("SIGTERM");
    await Promise.race([gone, new Promise((r) => setTimeout(r, 20_000))]);
    if (this.child === child) child.kill("SIGKILL");
  }

  /** Stops the agent and deletes the host's temp root (its copy of the executable is 100 MB). */
  async dispose() {
    await this.stop();
    rmSync(this.root, { recursive: true, force: true });
  }

  async exited(timeoutMs = 60_000): Promise<number | null> {
    return waitFor(
      "the agent to exit",
      () => (this.child === null && this.exits.length > 0 ? { code: this.exits.at(-1)! } : null),
      timeoutMs,
    ).then((x) => x.code);
  }
}

/** Runs podman (with the suite's CONTAINERS_CONF); throws with its output when it fails. */
export function podman(...args: string[]): string {
  const r = spawnSync("podman", args, { encoding: "utf8", timeout: 120_000 });
  if (r.status !== 0) throw new Error(`podman ${args.join(" ")} failed (${r.status}): ${r.stderr}`);
  return r.stdout;
}

/**
 * A container image in podman's store built from Debian's busybox-static (no registry here):
 * a root filesystem of /bin/busybox and its applets, imported with a CMD and volumes.
 */
export function localImage(ref: string, cmd: string[], volumes: string[] = []): string {
  const dir = mkdtempSync(join(tmpdir(), "hm-e2e-image-"));
  try {
    const root = join(dir, "rootfs");
    mkdirSync(join(root, "bin"), { recursive: true });
    for (const d of ["tmp", "data", "etc"]) mkdirSync(join(root, d), { recursive: true });
    copyFileSync("/bin/busybox", join(root, "bin/busybox"));
    chmodSync(join(root, "bin/busybox"), 0o755);
    for (const a of spawnSync("/bin/busybox", ["--list"], { encoding: "utf8" }).stdout.split("\n")) {
      if (a && a !== "busybox") symlinkSync("busybox", join(root, "bin", a));
    }
    const tar = join(dir, "rootfs.tar");
    const t = spawnSync("tar", ["-C", root, "-cf", tar, "."]);
    if (t.status !== 0) throw new Error("tar failed");
    const changes = [`CMD ${JSON.stringify(cmd)}`, "ENV PATH=/bin", ...volumes.map((v) => `VOLUME ${v}`)];
    podman("import", ...changes.flatMap((c) => ["--change", c]), tar, ref);
    return ref;
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

export interface PsRow {
  Id: string;
  Names: string[];
  State: string;
  Labels: Record<string, string>;
  StartedAt: number;
  Mounts?: string[];
}

/** What podman says of the containers of one scope. */
export function containersOf(scope: string): PsRow[] {
  return JSON.parse(
    podman("ps", "-a", "--filter", `label=io.harbormaster.scope=${scope}`, "--format", "json") || "[]",
  ) as PsRow[];
}

export function volumesOf(scope: string): string[] {
  return podman("volume", "ls", "--filter", `label=io.harbormaster.scope=${scope}`, "--format", "{{.Name}}")
    .split("\n")
    .filter(Boolean);
}

/** Removes what a test left in podman: its scope's containers and volumes, and its images. */
export function cleanPodman(scope: string, images: string[]) {
  for (const c of containersOf(scope)) spawnSync("podman", ["rm", "-f", "-v", c.Id]);
  for (const v of volumesOf(scope)) spawnSync("podman", ["volume", "rm", "-f", v]);
  for (const i of images) spawnSync("podman", ["rmi", "-f", i]);
}
