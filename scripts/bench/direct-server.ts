// Harbormaster in one workerd, with nothing in front: the worker as `wrangler deploy` would bundle
// it, run by Miniflare with the bindings wrangler.toml declares (migrations applied, fresh state in
// a temp dir). `wrangler dev` puts its own proxy worker, in a second workerd, in front of the one
// that runs Harbormaster: every host socket is held twice, and that proxy, not Harbormaster, is
// what gives out first under thousands of sockets. The soak (./scenarios/soak.ts) measures the
// runtime a deployment would have, so it serves its hosts from here; the ledger scenario measures
// the unchanged report here too, against the floor fixture served the same way (startDirectFloor).
import { spawnSync } from "node:child_process";
import { randomBytes } from "node:crypto";
import { mkdtempSync, readdirSync, readlinkSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { convertV4MiniflareOptions, Miniflare } from "miniflare";
import { unstable_getMiniflareWorkerOptions } from "wrangler";
import { freePort } from "../local-server.ts";
import { PAGE_BYTES, procStats, type ProcStat } from "./proc.ts";

const root = resolve(import.meta.dirname, "../..");
const wrangler = resolve(root, "node_modules/.bin/wrangler");

export interface DirectServer {
  url: string;
  admin: string;
  /** Resident memory (MB) of the one workerd process, from /proc; null when it cannot be read. */
  rssMb: () => number | null;
  /** Files (sockets included) the workerd process holds open, from /proc; null when unreadable. */
  openFiles: () => number | null;
  /** The same descriptors by kind: what a host costs in the open-files limit, and why. */
  openFileKinds: () => OpenFileKinds | null;
  /** CPU time (user + system, ms) the workerd process has used so far, from /proc; null when unreadable. */
  cpuMs: () => number | null;
  /** Times the runtime crashed and Miniflare started it again. */
  restarts: () => number;
  /** The workerd process ids of this server now (a native profiler attaches to them). */
  pids: () => number[];
  stop: () => Promise<void>;
}

function run(args: string[]) {
  const r = spawnSync(wrangler, args, { cwd: root, env: { ...process.env, CI: "true" }, encoding: "utf8" });
  if (r.status !== 0) throw new Error(`wrangler ${args.join(" ")} failed:\n${r.stdout}\n${r.stderr}`);
}

/** The workerd processes this process started (Miniflare's runtime is a direct child). */
function ownWorkerd(): [number, ProcStat][] {
  return [...(procStats() ?? new Map<number, ProcStat>()).entries()].filter(
    ([, p]) => p.comm === "workerd" && p.ppid === process.pid,
  );
}

/**
 * Which of this process's workerd processes belong to which Miniflare: the bench may run two side
 * by side (Harbormaster and the floor fixture, both with nothing in front), and each one's CPU
 * time must be its own. A runtime that restarted is claimed again by the server whose runtime it
 * replaced (a child no other server holds).
 */
const claimed = new Map<object, Set<number>>();

function claim(owner: object, before: Set<number>) {
  const others = new Set([...claimed].filter(([o]) => o !== owner).flatMap(([, pids]) => [...pids]));
  claimed.set(owner, new Set(ownWorkerd().flatMap(([pid]) => (before.has(pid) || others.has(pid) ? [] : [pid]))));
}

function workerdOf(owner: object): [number, ProcStat][] {
  const mine = claimed.get(owner) ?? new Set<number>();
  let own = ownWorkerd().filter(([pid]) => mine.has(pid));
  if (!own.length && mine.size) {
    claim(owner, new Set());
    own = ownWorkerd().filter(([pid]) => claimed.get(owner)!.has(pid));
  }
  return own;
}

function childWorkerdRssMb(own: [number, ProcStat][]): number | null {
  return own.length ? (own.reduce((sum, [, p]) => sum + p.rssPages, 0) * PAGE_BYTES) / 2 ** 20 : null;
}

/** The state dirs of the direct servers not yet stopped (a server mid-start included). */
const stateDirs = new Set<string>();

/**
 * Stops every direct server of this process at once, for a SIGINT/SIGTERM handler: Miniflare's
 * own exit hook (registered on each `new Miniflare`) ends the process in the same tick as the
 * handler, so there is no time to await `dispose()`. Kills this process's workerd runtimes (a
 * server still starting included) and removes the servers' state, synchronously.
 */
export function killDirectServers() {
  for (const [pid] of ownWorkerd()) {
    try {
      process.kill(pid, "SIGKILL");
    } catch {
      // gone meanwhile
    }
  }
  for (const dir of stateDirs) rmSync(dir, { recursive: true, force: true });
  stateDirs.clear();
}

/** A temp dir for a server's state, removed by `removeState` or at a signal (`killDirectServers`). */
function stateDir(parent: string, prefix: string): string {
  const dir = mkdtempSync(join(parent, prefix));
  stateDirs.add(dir);
  return dir;
}

function removeState(dir: string) {
  rmSync(dir, { recursive: true, force: true });
  stateDirs.delete(dir);
}

let tick: number | null = null;
/** Clock ticks a second, as /proc counts CPU time. */
function clockTick(): number {
  tick ??= Number(spawnSync("getconf", ["CLK_TCK"], { encoding: "utf8" }).stdout.trim()) || 100;
  return tick;
}

function childWorkerdCpuMs(own: [number, ProcStat][]): number | null {
  return own.length ? (own.reduce((sum, [, p]) => sum + p.ticks, 0) * 1000) / clockTick() : null;
}

/** Descriptors the workerd processes of one server hold: what the open-files limit counts. */
function childWorkerdOpenFiles(own: [number, ProcStat][]): number | null {
  if (!own.length) return null;
  try {
    return own.reduce((sum, [pid]) => sum + readdirSync(`/proc/${pid}/fd`).length, 0);
  } catch {
    return null;
  }
}

/**
 * The runtime's descriptors by what they are: sockets (each host's connection, the runtime's own
 * listeners and pipes) and the SQLite files of the objects awake now (an object's database with
 * its `-wal` and `-shm`: three per awake object, none for one asleep).
 */
interface OpenFileKinds {
  total: number;
  sockets: number;
  sqlite: number;
  other: number;
}

function childWorkerdFileKinds(own: [number, ProcStat][]): OpenFileKinds | null {
  if (!own.length) return null;
  const kinds: OpenFileKinds = { total: 0, sockets: 0, sqlite: 0, other: 0 };
  try {
    for (const [pid] of own) {
      for (const fd of readdirSync(`/proc/${pid}/fd`)) {
        let target: string;
        try {
          target = readlinkSync(`/proc/${pid}/fd/${fd}`);
        } catch {
          continue; // closed meanwhile
        }
        kinds.total++;
        if (target.startsWith("socket:")) kinds.sockets++;
        else if (/\.sqlite(-wal|-shm)?$/.test(target)) kinds.sqlite++;
        else kinds.other++;
      }
    }
  } catch {
    return null;
  }
  return kinds;
}

export interface DirectOptions {
  /** Where it keeps its state: the OS temp dir unless the caller names one (the bench's tmpfs). */
  stateParent?: string;
  /** The runtime's V8 inspector on this loopback port (DevTools protocol: ./profile-report.ts). */
  inspectorPort?: number;
}

export async function startDirectServer(
  vars: Record<string, string> = {},
  { stateParent = tmpdir(), inspectorPort }: DirectOptions = {},
): Promise<DirectServer> {
  const persist = stateDir(stateParent, "harbormaster-direct-");
  const admin = randomBytes(24).toString("base64url");
  const outdir = join(persist, "bundle");
  try {
    run(["deploy", "--dry-run", "--outdir", outdir]);
    run(["d1", "migrations", "apply", "DB", "--local", "--persist-to", persist]);
  } catch (err) {
    removeState(persist);
    throw err;
  }
  // The bundle is one ES module plus the text files it imports (the agent's systemd unit, renamed
  // by its hash at the bundle's root): listed one by one, since wrangler's rules name source paths.
  const { modulesRules: _rules, ...workerOptions } = unstable_getMiniflareWorkerOptions(
    resolve(root, "wrangler.toml"),
  ).workerOptions;
  return serve(persist, admin, "/healthz", (port, onRestart) =>
    // wrangler describes the worker in Miniflare's previous options shape.
    convertV4MiniflareOptions({
      ...workerOptions,
      modules: [
        { type: "ESModule", path: join(outdir, "index.js") },
        ...readdirSync(outdir)
          .filter((f) => f.endsWith(".service"))
          .map((f) => ({ type: "Text" as const, path: join(outdir, f) })),
      ],
      modulesRoot: outdir,
      bindings: {
        // oxlint-disable-next-line unicorn/no-useless-fallback-in-spread -- the type admits non-objects
        ...(workerOptions.bindings ?? {}),
        ADMIN_TOKEN: admin,
        ALLOW_LOOPBACK_HTTP: "1",
        ACCESS_LOG: "off",
        PARK_TRUST_S: "30",
        ...vars,
      },
      host: "127.0.0.1",
      port,
      // wrangler's `--persist-to` layout, so the migrations applied above are the database it opens.
      resourcePersistencePath: join(persist, "v3"),
      unsafeHandleRuntimeRestart: onRestart,
      ...(inspectorPort ? { inspectorPort, inspectorHost: "127.0.0.1" } : {}),
    }),
  );
}

/**
 * The benchmark's floor fixture (./floor) the same way: in one workerd with nothing in front, so a
 * floor and Harbormaster measured direct are measured alike.
 */
export async function startDirectFloor({
  stateParent = tmpdir(),
  inspectorPort,
}: DirectOptions = {}): Promise<DirectServer> {
  const persist = stateDir(stateParent, "harbormaster-floor-direct-");
  const config = resolve(import.meta.dirname, "floor/wrangler.toml");
  const { modulesRules: _rules, ...workerOptions } = unstable_getMiniflareWorkerOptions(config).workerOptions;
  return serve(persist, "", "/empty", (port, onRestart) =>
    convertV4MiniflareOptions({
      ...workerOptions,
      modules: [{ type: "ESModule", path: resolve(import.meta.dirname, "floor/worker.js") }],
      modulesRoot: resolve(import.meta.dirname, "floor"),
      host: "127.0.0.1",
      port,
      resourcePersistencePath: join(persist, "v3"),
      unsafeHandleRuntimeRestart: onRestart,
      ...(inspectorPort ? { inspectorPort, inspectorHost: "127.0.0.1" } : {}),
    }),
  );
}

let starting: Promise<void> = Promise.resolve();

async function serve(
  persist: string,
  admin: string,
  health: string,
  options: (port: number, onRestart: () => void) => ConstructorParameters<typeof Miniflare>[0],
): Promise<DirectServer> {
  // Which runtime is whose is told by the processes new since the start: one start at a time,
  // queued before anything is awaited.
  const turn = starting;
  let started = () => {};
  starting = new Promise<void>((r) => (started = r));
  await turn;
  let port: number;
  try {
    port = await freePort();
  } catch (err) {
    started();
    removeState(persist);
    throw err;
  }
  let restarts = 0;
  const owner = {};
  const before = new Set(ownWorkerd().map(([pid]) => pid));
  const mf = new Miniflare(options(port, () => restarts++));
  const stop = async () => {
    await mf.dispose();
    claimed.delete(owner);
    removeState(persist);
  };
  let url: string;
  try {
    try {
      url = (await mf.ready).toString().replace(/\/$/, "");
      claim(owner, before);
    } finally {
      started();
    }
    const res = await fetch(`${url}${health}`);
    await res.body?.cancel();
    if (!res.ok) throw new Error(`the direct server answered ${health} with ${res.status}`);
  } catch (err) {
    // A server that did not come up is no one's to stop: its runtime would outlive the bench.
    await stop().catch(() => {});
    throw err;
  }
  return {
    url,
    admin,
    rssMb: () => childWorkerdRssMb(workerdOf(owner)),
    openFiles: () => childWorkerdOpenFiles(workerdOf(owner)),
    openFileKinds: () => childWorkerdFileKinds(workerdOf(owner)),
    cpuMs: () => childWorkerdCpuMs(workerdOf(owner)),
    restarts: () => restarts,
    pids: () => workerdOf(owner).map(([pid]) => pid),
    stop,
  };
}
