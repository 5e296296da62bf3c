// A private local server for tests and tools: wrangler dev on a free loopback port, fresh local
// state in a temp dir, migrations applied, its own admin token (the developer's .dev.vars is
// neither read nor written). `node scripts/local-server.ts` runs one and prints its URL/token.
// The end-to-end tests, the crash check and the benchmark (Harbormaster and its floor fixture)
// all start their servers here.
import { spawn, spawnSync } from "node:child_process";
import { randomBytes } from "node:crypto";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";

const root = resolve(import.meta.dirname, "..");
const wrangler = resolve(root, "node_modules/.bin/wrangler");
const LOCAL_ENTRY = "src/local/index.ts";

export const freePort = () =>
  new Promise<number>((res, rej) => {
    const s = createServer();
    s.listen(0, "127.0.0.1", () => {
      const { port } = s.address() as { port: number };
      s.close(() => res(port));
    });
    s.on("error", rej);
  });

// A server runs in a process group of its own (so that a stop reaches workerd too), which the
// death of the process that started it would not reach: one still running when this process
// exits (a test whose hook timed out while the server was starting, a tool that returned without
// stopping it) is killed then, its fresh state removed.
const running = new Set<() => void>();
let reaping = false;
const reapOnExit = (kill: () => void) => {
  running.add(kill);
  if (reaping) return;
  reaping = true;
  process.once("exit", () => running.forEach((k) => k()));
};

export interface LocalServer {
  url: string;
  admin: string;
  /** The state directory, to start another server on the same state (`reuse`). */
  persist: string;
  stop: () => void;
  /** kill -9 of wrangler and workerd, leaving the state behind as a crash would. */
  crash: () => void;
  log: () => string;
  /** wrangler's process id (its workerd runs below it): the benchmark reads their CPU time. */
  pid: number;
}

export interface LocalServerOptions {
  /** Names the state directory (harbormaster-<label>-…). */
  label?: string;
  /**
   * Where the state directory is made (default: the OS temp dir). The benchmark puts it on tmpfs,
   * so a storage commit's disk sync is not what it measures (docs/benchmarks.md).
   */
  stateParent?: string;
  startTimeoutMs?: number;
  /** Start on the state (and with the admin token) of a server started before. */
  reuse?: { persist: string; admin: string };
  /** Another worker's wrangler.toml (the benchmark's floor fixture): it has no D1, so no migrations. */
  config?: string;
  /** The path answered 2xx once the server is up. */
  health?: string;
  /** More `wrangler dev` arguments (`--test-scheduled`, `--var NAME:value`, …). */
  devArgs?: string[];
  /**
   * Run the local entry (src/local/index.ts): the same worker with the cost meter and the D1 taps,
   * and their routes /__local/meter and /__local/d1-statements (benchmarks, cost runs).
   */
  metered?: boolean;
  /**
   * PARK_TRUST_S: wrangler dev never tells the worker that a client went away, so a parked
   * FleetLock request is believed for this long (docs/fleetlock.md).
   */
  parkTrustS?: number;
}

/**
 * Starts the server, on another free port if the one picked was taken meanwhile: a port is free
 * when picked and bound by wrangler a moment later, and servers started side by side (the
 * benchmark's two, other suites' on a shared machine) can take it in between.
 */
export async function startLocalServer(options: LocalServerOptions = {}): Promise<LocalServer> {
  for (let attempt = 1; ; attempt++) {
    try {
      return await startOnce(options);
    } catch (err) {
      if (!(err instanceof PortTaken) || attempt === 3) throw err;
    }
  }
}

class PortTaken extends Error {}

/**
 * The names of the worker's vars and required secrets in a wrangler config. wrangler dev takes
 * them from its own environment over every file and `--var` (with `[secrets]` declared it reads
 * process.env), so a caller's exported ADMIN_TOKEN would replace the token this server wrote for
 * itself, and an exported ACCESS_LOG the benchmark's setting.
 */
export function workerSettingNames(config: string): string[] {
  const toml = readFileSync(config, "utf8");
  const section = (name: string) =>
    new RegExp(`^\\[${name}\\]\\s*$([\\s\\S]*?)(?=^\\[|(?![\\s\\S]))`, "m").exec(toml)?.[1] ?? "";
  const vars = [...section("vars").matchAll(/^([A-Za-z_][A-Za-z0-9_]*)\s*=/gm)].map((m) => m[1]);
  const secrets = [...(/required\s*=\s*\[([^\]]*)\]/.exec(section("secrets"))?.[1].matchAll(/"([^"]+)"/g) ?? [])].map(
    (m) => m[1],
  );
  return [...new Set([...vars, ...secrets, "ADMIN_TOKEN"])];
}

/** The caller's environment less the worker's own settings (workerSettingNames), for wrangler. */
function wranglerEnv(config: string): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = { ...process.env, CI: "true" };
  for (const name of workerSettingNames(config)) delete env[name];
  return env;
}

async function startOnce({
  label = "local",
  stateParent = tmpdir(),
  startTimeoutMs = 90_000,
  reuse,
  config,
  health = "/healthz",
  devArgs = [],
  parkTrustS = 30,
  metered = false,
}: LocalServerOptions): Promise<LocalServer> {
  const port = await freePort();
  const persist = reuse?.persist ?? mkdtempSync(join(stateParent, `harbormaster-${label}-`));
  const admin = reuse?.admin ?? randomBytes(24).toString("base64url");
  const envFile = join(persist, "server.vars");
  // ACCESS_LOG: a line per request locally (the deployed default logs writes only); `--var` wins.
  writeFileSync(
    envFile,
    `ADMIN_TOKEN=${admin}\n${config ? "" : `PARK_TRUST_S=${parkTrustS}\nALLOW_LOOPBACK_HTTP=1\nACCESS_LOG=on\n`}`,
    { mode: 0o600 },
  );
  if (!config) {
    const migrate = spawnSync(wrangler, ["d1", "migrations", "apply", "DB", "--local", "--persist-to", persist], {
      cwd: root,
      env: { ...process.env, CI: "true" },
      encoding: "utf8",
    });
    if (migrate.status !== 0) throw new Error(`migrations failed:\n${migrate.stdout}\n${migrate.stderr}`);
  }
  const child = spawn(
    wrangler,
    [
      "dev",
      ...(metered ? [LOCAL_ENTRY] : []),
      ...(config ? ["--config", config] : []),
      "--ip",
      "127.0.0.1",
      "--port",
      String(port),
      "--persist-to",
      persist,
      "--env-file",
      envFile,
      "--log-level",
      "error",
      "--show-interactive-dev-session=false",
      ...devArgs,
    ],
    {
      cwd: root,
      stdio: ["ignore", "pipe", "pipe"],
      env: wranglerEnv(config ?? resolve(root, "wrangler.toml")),
      detached: true,
    },
  );
  let log = "";
  child.stdout.on("data", (d: Buffer) => (log += d));
  child.stderr.on("data", (d: Buffer) => (log += d));
  const url = `http://127.0.0.1:${port}`;
  // wrangler starts workerd as a child: signal the whole process group we started.
  const signal = (sig: NodeJS.Signals) => {
    try {
      process.kill(-child.pid!, sig);
    } catch {}
  };
  const orphaned = () => {
    signal("SIGKILL");
    if (!reuse) rmSync(persist, { recursive: true, force: true });
  };
  reapOnExit(orphaned);
  const stop = () => {
    running.delete(orphaned);
    signal("SIGTERM");
    rmSync(persist, { recursive: true, force: true });
  };
  // The caller keeps the state to start on it again; the group still goes if this process exits.
  const crash = () => signal("SIGKILL");
  const deadline = Date.now() + startTimeoutMs;
  for (;;) {
    try {
      if ((await fetch(`${url}${health}`)).ok) break;
    } catch {}
    if (Date.now() > deadline || child.exitCode !== null) {
      const taken = /Address already in use/.test(log);
      running.delete(orphaned);
      signal("SIGKILL");
      // A state directory made for this attempt goes; one handed in (reuse) is the caller's.
      if (!reuse) rmSync(persist, { recursive: true, force: true });
      if (taken) throw new PortTaken(`port ${port} was taken:\n${log}`);
      throw new Error(`server did not start:\n${log}`);
    }
    await new Promise((r) => setTimeout(r, 250));
  }
  return { url, admin, persist, stop, crash, log: () => log, pid: child.pid! };
}

if (import.meta.url === `file://${process.argv[1]}`) {
  // `node scripts/local-server.ts --metered`: the local entry, meter and D1 taps on.
  const s = await startLocalServer({ metered: process.argv.includes("--metered") });
  console.log(JSON.stringify({ url: s.url, token: s.admin }));
  for (const sig of ["SIGINT", "SIGTERM"]) process.on(sig, () => (s.stop(), process.exit(0)));
}
