/**
 * Two `harbormaster-agent run` on one state directory (a `run` typed in a shell beside the
 * service, a second unit pointed at the same directory): two loops would drive the same containers
 * and hooks at once (two updates of one agent, each undoing the other's half), write the same
 * files, and each start's sweep would delete the other's temporaries under its feet. One runs; the
 * other says which process holds the directory and exits (1: systemd starts it again later, and it
 * runs once the first is gone). A holder killed with SIGKILL leaves nothing that blocks the next.
 */
import { spawn, type ChildProcess } from "node:child_process";
import { mkdirSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { afterAll, afterEach, describe, expect, it } from "vitest";
import { emptyServer, tempHost } from "./cli-helpers.ts";

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
