/**
 * Two `harbormaster-agent run` on one state directory (a `run` typed in a shell beside the
 * service, a second unit pointed at the same directory): two loops would drive the same containers
 * and hooks at once (two updates of one agent, each undoing the other's half), write the same
 * files, and each start's sweep would delete the other's temporaries under its feet. One runs; the
 * other says which process holds the directory and exits (1: systemd starts it again later, and it
 * runs once the first is gone). A holder killed with SIGKILL leaves nothing that blocks the next.
 */
import { spawn, type ChildProcess } from "node:child_process";
import { createHash } from "node:crypto";
import { mkdirSync, readFileSync, realpathSync, rmSync, writeFileSync } from "node:fs";
import { createConnection, createServer } from "node:net";
import { join } from "node:path";
import { afterAll, afterEach, describe, expect, it } from "vitest";
import { holdStateDir } from "../cli/single-run.ts";
import { emptyServer, tempHost } from "./cli-helpers.ts";
import { sh } from "./helpers.ts";

const server = await emptyServer();
afterAll(() => server.close());

const children: ChildProcess[] = [];
const roots: string[] = [];
afterEach(() => {
  for (const c of children.splice(0)) if (c.exitCode === null && c.signalCode === null) c.kill("SIGKILL");
  for (const r of roots.splice(0)) rmSync(r, { recursive: true, force: true });
});

function host() {
  const h = tempHost("hm-single-run");
  roots.push(h.root);
  mkdirSync(h.stateDir, { recursive: true, mode: 0o700 });
  writeFileSync(
    join(h.stateDir, "identity.json"),
    JSON.stringify({
      url: server.url,
      server_id: "s",
      fleet: "f",
      hostname: "h",
      token: "hms.s.secret",
      reboot_group: "default",
      fleetlock_id: null,
      machine_id: "m",
      joined_at: "",
    }),
    { mode: 0o600 },
  );
  return {
    ...h,
    env: {
      ...h.env,
      HARBORMASTER_AGENT_TRANSPORT: "http",
      HARBORMASTER_AGENT_ENGINE: join(h.root, "no-such-engine"),
      HARBORMASTER_AGENT_TARBALL_ROOT: h.root,
      // The run after the SIGKILL counts a crash: its wait kept short.
      HARBORMASTER_AGENT_CRASH_BACKOFF_BASE_S: "1",
    },
  };
}

function start(env: Record<string, string>) {
  const child = spawn(
    join(import.meta.dirname, "../../node_modules/node/bin/node"),
    [join(import.meta.dirname, "../cli/main.ts"), "run"],
    { env: { ...process.env, ...env }, stdio: ["ignore", "ignore", "pipe"] },
  );
  children.push(child);
  let log = "";
  child.stderr!.on("data", (d: Buffer) => (log += d));
  const exited = new Promise<number | null>((ok) => child.on("exit", (code) => ok(code)));
  return { child, exited, log: () => log };
}

const exitWithin = (run: ReturnType<typeof start>, ms: number) =>
  Promise.race([run.exited, new Promise<"still running">((r) => setTimeout(() => r("still running"), ms))]);

const reports = () => server.requests.filter((r) => r.url === "/v1/agent/inventory").length;

async function until(what: string, pred: () => boolean, ms = 30_000) {
  const deadline = Date.now() + ms;
  while (!pred()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 25));
  }
}

describe("a second run on a state directory another run holds", () => {
  it("exits at once naming the holder, leaves the first running, and runs once the first was killed", async () => {
    const h = host();
    const before = reports();
    const first = start(h.env);
    await until("the first run's report", () => reports() > before);

    const second = start(h.env);
    expect(await exitWithin(second, 10_000)).toBe(1);
    expect(second.log()).toContain(`pid ${first.child.pid}`);
    expect(second.log()).toContain(h.stateDir);
    expect(first.child.exitCode).toBeNull();

    // SIGKILL: nothing of the holder's is left that would keep the next run out.
    first.child.kill("SIGKILL");
    await first.exited;
    const afterKill = reports();
    const third = start(h.env);
    await until("the next run's report", () => reports() > afterKill);
    expect(third.child.exitCode).toBeNull();
    third.child.kill("SIGTERM");
    expect(await third.exited).toBe(0);
  });

  it("is refused for a path that names the same directory another way", async () => {
    const h = host();
    const before = reports();
    const first = start(h.env);
    await until("the first run's report", () => reports() > before);
    const second = start({ ...h.env, HARBORMASTER_AGENT_STATE_DIR: `${h.stateDir}/./` });
    expect(await exitWithin(second, 10_000)).toBe(1);
    expect(first.child.exitCode).toBeNull();
  });
});

describe("the hold's name", () => {
  // An abstract socket has no owner nor mode: any local user may bind any free name. One the
  // directory's path alone gives away would let an unprivileged user keep the root service out
  // for good (it would exit 1 at every start), leaving the host's agents unmanaged.
  it("cannot be taken first by someone who knows only the state directory's path", async () => {
    const h = host();
    const guessed = `\0harbormaster-agent.${createHash("sha256").update(realpathSync(h.stateDir)).digest("hex").slice(0, 40)}`;
    const squatter = createServer();
    await new Promise<void>((ok) => squatter.listen(guessed, ok));
    try {
      const hold = await holdStateDir(h.stateDir);
      expect(hold.held).toBe(true);
      if (hold.held) {
        // and it still excludes a second run on the same directory
        expect((await holdStateDir(h.stateDir)).held).toBe(false);
        await hold.release();
      }
    } finally {
      await new Promise((ok) => squatter.close(ok));
    }
  });

  // The name shows in /proc/net/unix while a run holds it: a local user who watched it there
  // binds it the moment the run ends (a self-update's restart, a crash) and waits for the next.
  it("is not kept from the service by another user who bound the name it saw in use", async () => {
    const h = host();
    const first = await holdStateDir(h.stateDir);
    if (!first.held) throw new Error("not held");
    const seen = abstractNames();
    await first.release();
    const name = [...seen].find((n) => n.startsWith("@harbormaster-agent.") && !abstractNames().has(n));
    expect(name).toBeDefined();
    const squatter = spawn(
      process.execPath,
      [
        "-e",
        `require("net").createServer().listen("\\0" + process.argv[1], () => console.log("ready"))`,
        name!.slice(1),
      ],
      { uid: 65534, gid: 65534, stdio: ["ignore", "pipe", "inherit"] },
    );
    children.push(squatter);
    await new Promise((ok) => squatter.stdout!.once("data", ok));
    const hold = await holdStateDir(h.stateDir);
    expect(hold.held).toBe(true);
    if (!hold.held) return;
    // Still one run: a second is kept out, and told the real holder (not the squatter).
    expect(await holdStateDir(h.stateDir)).toEqual({ held: false, holder: process.pid });
    await hold.release();
  });

  it("is held against a run in another PID namespace, which /proc does not show the holder to", async () => {
    const h = host();
    const hold = await holdStateDir(h.stateDir);
    if (!hold.held) throw new Error("not held");
    try {
      const script = `const { holdStateDir } = await import(${JSON.stringify(join(import.meta.dirname, "../cli/single-run.ts"))}); const h = await holdStateDir(process.argv[1]); console.log(JSON.stringify({ held: h.held, holder: h.held ? undefined : h.holder }));`;
      const out = await sh("unshare", [
        "--pid",
        "--fork",
        "--mount-proc",
        join(import.meta.dirname, "../../node_modules/node/bin/node"),
        "--input-type=module",
        "-e",
        script,
        h.stateDir,
      ]);
      expect(JSON.parse(out)).toEqual({ held: false, holder: null });
    } finally {
      await hold.release();
    }
  });

  it("is given back at once on release, even with a client connected that never hangs up", async () => {
    const h = host();
    const hold = await holdStateDir(h.stateDir);
    if (!hold.held) throw new Error("not held");
    const name = [...abstractNames()].filter((n) => n.startsWith("@harbormaster-agent."));
    const clients = name.map((n) => createConnection(`\0${n.slice(1)}`).on("error", () => {}));
    await new Promise((r) => setTimeout(r, 200));
    const released = await Promise.race([
      hold.release().then(() => "released"),
      new Promise((r) => setTimeout(() => r("still held after 3 s"), 3_000)),
    ]);
    for (const c of clients) c.destroy();
    expect(released).toBe("released");
  });
});

/** The abstract socket names listening now, as /proc/net/unix shows them (`@name`). */
function abstractNames(): Set<string> {
  return new Set(
    readFileSync("/proc/net/unix", "utf8")
      .split("\n")
      .slice(1)
      .map((l) => l.trim().split(/\s+/))
      .filter((f) => f[3] === "00010000" && f[7]?.startsWith("@"))
      .map((f) => f[7]),
  );
}
