import { existsSync, readFileSync } from "node:fs";
import { chmod, mkdir, readdir, readFile, readlink, rm, utimes, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { reconcile } from "../driver.ts";
import { BlobFetcher, DigestMismatchError } from "../drivers/download.ts";
import { TarballDriver } from "../drivers/tarball.ts";
import { BlobServer, eventually, sh, storedSpec, tempDir } from "./helpers.ts";

/** LSB-style hooks around one background process whose pid is kept in the agent's data dir. */
const HOOKS: Record<string, string> = {
  "bin/install": `#!/bin/sh\necho "install $HM_AGENT_VERSION" >> "$HM_DATA_DIR/log"\n`,
  "bin/start": `#!/bin/sh
[ -f "$HM_DATA_DIR/pid" ] && kill -0 "$(cat "$HM_DATA_DIR/pid")" 2>/dev/null && exit 0
setsid sleep 1000 </dev/null >/dev/null 2>&1 &
echo $! > "$HM_DATA_DIR/pid"
echo "start $HM_AGENT_VERSION" >> "$HM_DATA_DIR/log"
`,
  "bin/stop": `#!/bin/sh
[ -f "$HM_DATA_DIR/pid" ] && kill "$(cat "$HM_DATA_DIR/pid")" 2>/dev/null
rm -f "$HM_DATA_DIR/pid"
echo "stop $HM_AGENT_VERSION" >> "$HM_DATA_DIR/log"
`,
  "bin/status": `#!/bin/sh
[ -f "$HM_DATA_DIR/pid" ] && kill -0 "$(cat "$HM_DATA_DIR/pid")" 2>/dev/null && exit 0
exit 3
`,
  "bin/remove": `#!/bin/sh\necho "removed $HM_AGENT_NAME" >> "$REMOVE_MARKER"\n`,
  "bin/health": `#!/bin/sh
if [ -e "$HM_DATA_DIR/sick" ]; then echo "sick: $(cat "$HM_DATA_DIR/sick")"; exit 1; fi
`,
};

const MANIFEST_HOOKS = {
  install: "bin/install",
  start: "bin/start",
  stop: "bin/stop",
  status: "bin/status",
  remove: "bin/remove",
};

describe("TarballDriver (real hook processes)", () => {
  const server = new BlobServer();
  let work: string;
  let root: string;
  let driver: TarballDriver;
  let marker: string;

  beforeAll(async () => {
    await server.start();
    work = await tempDir("hm-tarball-");
    root = join(work, "root");
    marker = join(work, "removed.log");
    driver = new TarballDriver({
      root,
      hookTimeoutMs: 5_000,
      env: { REMOVE_MARKER: marker },
      blobs: new BlobFetcher({
        baseUrl: server.url,
        token: server.token,
        cacheDir: join(work, "state", "cache"),
        retryDelayMs: 10,
      }),
    });
  });

  afterEach(async () => {
    for (const a of await driver.list()) await driver.remove(a).catch(() => {});
    await rm(join(root, "opt"), { recursive: true, force: true });
  });

  afterAll(async () => {
    await server.stop();
    await rm(work, { recursive: true, force: true });
  });

  /** A tarball for `name` `version` with the standard hooks, some replaced, on the blob server. */
  let n = 0;
  const tarball = async (
    name: string,
    version: string,
    opts: { hooks?: Record<string, string>; health?: boolean; manifest?: object } = {},
  ) => {
    const dir = join(work, `src-${n++}`);
    const files = { ...HOOKS, ...opts.hooks };
    for (const [path, content] of Object.entries(files)) {
      await mkdir(join(dir, path, ".."), { recursive: true });
      await writeFile(join(dir, path), content);
      await chmod(join(dir, path), 0o755);
    }
    const manifest = opts.manifest ?? {
      name,
      version,
      hooks: { ...MANIFEST_HOOKS, ...(opts.health ? { health: "bin/health" } : {}) },
    };
    await writeFile(join(dir, "manifest.json"), JSON.stringify(manifest));
    const out = join(work, `pkg-${n++}.tgz`);
    await sh("tar", ["-czf", out, "-C", dir, "."]);
    return server.put(await readFile(out));
  };

  const agentDir = (name: string) => join(root, "opt", "harbormaster", "agents", name);
  const log = async (name: string) => (await readFile(join(agentDir(name), "data", "log"), "utf8")).trim().split("\n");
  const pidOf = async (name: string) => Number(await readFile(join(agentDir(name), "data", "pid"), "utf8"));
  /** Whether a process runs (a killed one not yet reaped by its new parent counts as gone). */
  const alive = (pid: number) => {
    try {
      return !/^\d+ \(.*\) Z/.test(readFileSync(`/proc/${pid}/stat`, "utf8"));
    } catch {
      return false;
    }
  };

  it("installs a verified tarball under NAME/VERSION, runs install then start, and lists what status says", async () => {
    const spec = storedSpec("metrics", "1.0.0", await tarball("metrics", "1.0.0"), "tarball");
    await driver.install(spec);
    expect(await readlink(join(agentDir("metrics"), "current"))).toBe("1.0.0");
    expect(JSON.parse(await readFile(join(agentDir("metrics"), "1.0.0", "manifest.json"), "utf8")).version).toBe(
      "1.0.0",
    );
    expect(await log("metrics")).toEqual(["install 1.0.0", "start 1.0.0"]);
    expect(alive(await pidOf("metrics"))).toBe(true);
    expect(await driver.list()).toEqual([
      { name: "metrics", image: "metrics", version: "1.0.0", instance_id: spec.instance_id, state: "running" },
    ]);
  });

  it("lists a process that died as stopped (status 3), and a status hook that fails otherwise as failed with its output", async () => {
    await driver.install(storedSpec("svc", "1", await tarball("svc", "1"), "tarball"));
    process.kill(await pidOf("svc"), "SIGKILL");
    await eventually(async () => (await driver.list())[0]?.state === "stopped");
    await writeFile(join(agentDir("svc"), "1", "bin", "status"), '#!/bin/sh\necho "cannot read config" >&2\nexit 1\n');
    expect(await driver.list()).toEqual([
      expect.objectContaining({
        name: "svc",
        state: "failed",
        reason: expect.stringMatching(/status hook exited with code 1: cannot read config/),
      }),
    ]);
  });

  it("updates beside the old version: install new, stop old, start new, and only then delete the old directory", async () => {
    const spec = storedSpec("agentx", "1", await tarball("agentx", "1"), "tarball");
    await driver.install(spec);
    await writeFile(join(agentDir("agentx"), "data", "state"), "kept");
    const [current] = await driver.list();
    await driver.update(current, storedSpec("agentx", "2", await tarball("agentx", "2"), "tarball", spec.instance_id));
    expect(await log("agentx")).toEqual(["install 1", "start 1", "install 2", "stop 1", "start 2"]);
    expect((await readdir(agentDir("agentx"))).sort()).toEqual(["2", "current", "data"]);
    expect(await readFile(join(agentDir("agentx"), "data", "state"), "utf8")).toBe("kept");
    expect(await driver.list()).toEqual([
      { name: "agentx", image: "agentx", version: "2", instance_id: spec.instance_id, state: "running" },
    ]);
  });

  it("sweeps the version directories killed updates left, keeping the current and the newest other", async () => {
    const spec = storedSpec("swept", "1", await tarball("swept", "1"), "tarball");
    await driver.install(spec);
    const base = agentDir("swept");
    // What updates killed between their unpack and their clean-up leave: whole versions beside the
    // current one (oldest first), each with the driver's record of it.
    const at = Date.now() / 1000;
    for (const [i, v] of ["2", "3", "4"].entries()) {
      await sh("cp", ["-a", join(base, "1"), join(base, v)]);
      await utimes(join(base, v, ".harbormaster.json"), at - 300 + i * 60, at - 300 + i * 60);
    }
    // Not a version (no record of the driver's): not ours to judge.
    await mkdir(join(base, "notes"));
    await reconcile({ server_id: "s", generation: 1, lifecycle: "run", agents: [spec] }, driver);
    expect((await readdir(base)).sort()).toEqual(["1", "4", "current", "data", "notes"]);
    expect(await readlink(join(base, "current"))).toBe("1");
    expect((await driver.list()).map((a) => [a.version, a.state])).toEqual([["1", "running"]]);
  });

  it("keeps the old version when the new one will not start, and says why in the hook's words", async () => {
    const spec = storedSpec("agenty", "1", await tarball("agenty", "1"), "tarball");
    await driver.install(spec);
    const [current] = await driver.list();
    const bad = await tarball("agenty", "2", {
      hooks: { "bin/start": '#!/bin/sh\necho "port 8080 already in use" >&2\nexit 1\n' },
    });
    const err = await driver
      .update(current, storedSpec("agenty", "2", bad, "tarball", spec.instance_id))
      .catch((e) => e);
    expect(err.message).toBe("agenty 2: start hook exited with code 1: port 8080 already in use");
    expect(await driver.list()).toEqual([expect.objectContaining({ version: "1", state: "running" })]);
    expect((await readdir(agentDir("agenty"))).sort()).toEqual(["1", "current", "data"]);
  });

  it("leaves no version behind when an install hook fails, neither on install nor on update, and keeps the running one", async () => {
    const failing = { "bin/install": '#!/bin/sh\necho "missing libfoo" >&2\nexit 1\n' };
    await expect(
      driver.install(storedSpec("job", "1", await tarball("job", "1", { hooks: failing }), "tarball")),
    ).rejects.toThrow(/missing libfoo/);
    expect(existsSync(join(agentDir("job"), "1"))).toBe(false);
    expect(await driver.list()).toEqual([]);

    await driver.install(storedSpec("job", "1", await tarball("job", "1"), "tarball"));
    const [current] = await driver.list();
    await expect(
      driver.update(current, storedSpec("job", "2", await tarball("job", "2", { hooks: failing }), "tarball")),
    ).rejects.toThrow(/missing libfoo/);
    expect(existsSync(join(agentDir("job"), "2"))).toBe(false);
    expect(await driver.list()).toEqual([expect.objectContaining({ name: "job", version: "1", state: "running" })]);
  });

  it("kills a hook that runs past its timeout, with everything it started, and reports the timeout", async () => {
    const hung = await tarball("slow", "1", {
      hooks: {
        "bin/install": '#!/bin/sh\necho "waiting for the lock"\nsleep 1000 &\necho $! > "$HM_DATA_DIR/child"\nwait\n',
      },
    });
    const started = Date.now();
    const outcome = await reconcile(
      { server_id: "s", generation: 1, lifecycle: "run", agents: [storedSpec("slow", "1", hung, "tarball")] },
      driver,
    );
    expect(Date.now() - started).toBeLessThan(15_000);
    expect(outcome.errors).toEqual([
      {
        agent: "slow",
        op: "install",
        message: "slow 1: install hook timed out after 5 s (killed): waiting for the lock",
      },
    ]);
    expect(outcome.agents).toEqual([]);
    const child = Number(await readFile(join(agentDir("slow"), "data", "child"), "utf8"));
    await eventually(async () => !alive(child), 5_000, "the hook's child to be killed");
  });

  it("refuses a tarball whose download does not match the digest: no directory, no hook run", async () => {
    const good = await tarball("bad", "1");
    const blob = server.put(Buffer.from("not the tarball"), good.digest);
    const err = await driver.install(storedSpec("bad", "1", blob, "tarball")).catch((e) => e);
    expect(err).toBeInstanceOf(DigestMismatchError);
    expect(existsSync(join(agentDir("bad"), "1"))).toBe(false);
    expect(await driver.list()).toEqual([]);
  });

  it("refuses a tarball that is another agent's or another version's", async () => {
    const other = await tarball("other", "1");
    const err = await driver.install(storedSpec("mine", "1", other, "tarball")).catch((e) => e);
    expect(err.message).toMatch(/the tarball is other 1, not mine 1; nothing was installed/);
    expect(await driver.list()).toEqual([]);
  });

  it("reports a failing health hook as failed with its output", async () => {
    const spec = storedSpec("checked", "1", await tarball("checked", "1", { health: true }), "tarball");
    await driver.install(spec);
    expect((await driver.list())[0].state).toBe("running");
    await writeFile(join(agentDir("checked"), "data", "sick"), "queue full");
    const outcome = await reconcile({ server_id: "s", generation: 1, lifecycle: "run", agents: [spec] }, driver);
    expect(outcome.agents).toEqual([expect.objectContaining({ name: "checked", state: "failed" })]);
    expect(outcome.errors).toEqual([
      { agent: "checked", op: "start", message: "checked 1: health hook exited with code 1: sick: queue full" },
    ]);
  });

  it("stop keeps the agent and its data; remove runs stop and remove, then deletes it all", async () => {
    await driver.install(storedSpec("gone", "1", await tarball("gone", "1"), "tarball"));
    const [current] = await driver.list();
    const pid = await pidOf("gone");
    await driver.stop(current);
    await eventually(async () => !alive(pid), 5_000, "the agent's process to end");
    expect(await driver.list()).toEqual([{ ...current, state: "stopped" }]);
    expect(await log("gone")).toEqual(["install 1", "start 1", "stop 1"]);
    await driver.remove(current);
    expect(existsSync(agentDir("gone"))).toBe(false);
    expect(await readFile(marker, "utf8")).toMatch(/removed gone/);
    expect(await driver.list()).toEqual([]);
  });

  it("keeps everything when the remove hook fails", async () => {
    const spec = storedSpec(
      "sticky",
      "1",
      await tarball("sticky", "1", { hooks: { "bin/remove": "#!/bin/sh\necho busy >&2\nexit 2\n" } }),
      "tarball",
    );
    await driver.install(spec);
    const [current] = await driver.list();
    await expect(driver.remove(current)).rejects.toThrow("sticky 1: remove hook exited with code 2: busy");
    expect(existsSync(join(agentDir("sticky"), "data", "log"))).toBe(true);
    expect((await driver.list()).map((a) => a.name)).toEqual(["sticky"]);
    await writeFile(join(agentDir("sticky"), "1", "bin", "remove"), "#!/bin/sh\nexit 0\n");
  });

  it("reports a health hook that prints 50 MB, bytes that are not text, terminal escapes (7- and 8-bit) and a progress bar's carriage returns by its last words, as text", async () => {
    const noisy = await tarball("noisy", "1", {
      health: true,
      hooks: {
        "bin/health":
          "#!/bin/sh\nhead -c 52428800 /dev/zero | tr '\\0' 'x'\nprintf '\\n\\377\\376 \\033[31mdisk\\033[0m full\\000\\007 \\302\\23331mhot\\302\\2330m\\r\\n 50%%\\r100%%\\r\\n' >&2\nexit 1\n",
      },
    });
    const spec = storedSpec("noisy", "1", noisy, "tarball");
    await driver.install(spec);
    const outcome = await reconcile({ server_id: "s", generation: 1, lifecycle: "run", agents: [spec] }, driver);
    expect(outcome.agents).toEqual([expect.objectContaining({ name: "noisy", state: "failed" })]);
    const [error] = outcome.errors;
    expect(error.message).toMatch(
      /^noisy 1: health hook exited with code 1: x+\n\ufffd\ufffd disk full\ufffd\ufffd hot\n 50%\n100%$/,
    );
    expect(error.message.length).toBeLessThanOrEqual(4096);
  });

  it("installs once the start hook exits, though a child it left keeps the hook's output open", async () => {
    const spec = storedSpec(
      "daemon",
      "1",
      await tarball("daemon", "1", {
        hooks: {
          // The daemon inherits stdout and stderr, and escapes the hook's process group.
          "bin/start": '#!/bin/sh\nsetsid sleep 1000 &\necho $! > "$HM_DATA_DIR/pid"\necho started\n',
        },
      }),
      "tarball",
    );
    const started = Date.now();
    await driver.install(spec);
    expect(Date.now() - started).toBeLessThan(4_000);
    expect((await driver.list()).map((a) => [a.name, a.state])).toEqual([["daemon", "running"]]);
  });
});
