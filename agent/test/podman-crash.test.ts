/**
 * kill -9 of the agent between any two engine commands of an install or an update, with a real
 * podman. The engine is reached through a wrapper that, at the chosen command, "kills the agent":
 * that command and every one after it fail (the agent's own clean-up of the moment never reaches
 * the engine, as after a real kill). A new driver (the restarted agent) then reconciles until the
 * machine is the desired state: one container under the agent's name, running the desired
 * version, with its data, and nothing superseded left behind (no container, no image).
 */
import { chmodSync, existsSync, mkdirSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { reconcile } from "../driver.ts";
import { BlobFetcher } from "../drivers/download.ts";
import { PodmanDriver } from "../drivers/podman.ts";
import {
  BlobServer,
  buildImageSet,
  cleanPodman,
  newRunId,
  podman,
  storedSpec,
  tempDir,
  type ImageSet,
} from "./helpers.ts";

// Dies (exit 137, and every later call too) at the CRASH_NTH call of CRASH_VERB.
const WRAPPER = `#!/bin/sh
D="$CRASH_DIR"
[ -e "$D/dead" ] && { echo "the agent was killed" >&2; exit 137; }
if [ "$1" = "$CRASH_VERB" ]; then
  n=$(( $(cat "$D/seen" 2>/dev/null || echo 0) + 1 )); echo $n > "$D/seen"
  [ "$n" = "$CRASH_NTH" ] && { touch "$D/dead"; exit 137; }
fi
exec podman "$@"
`;

describe("an agent killed between two engine commands (real podman)", () => {
  const scope = newRunId();
  const server = new BlobServer();
  let dir: string;
  let blobs: ImageSet<"crashy">["blobs"];

  beforeAll(async () => {
    await server.start();
    dir = await tempDir("hm-podman-crash-");
    ({ blobs } = await buildImageSet(scope, server, {
      crashy: {
        // Its last words in colour, as many programs print them: the report gets the words.
        cmd: ["/bin/sh", "-c", "printf '\\033[31mcannot read /data/app.conf\\033[0m\\n'; sleep 0.1; exit 3"],
        volumes: ["/data"],
      },
    }));
    writeFileSync(join(dir, "podman"), WRAPPER);
    chmodSync(join(dir, "podman"), 0o755);
  }, 120_000);

  afterAll(async () => {
    await server.stop();
    await cleanPodman(scope, []);
    rmSync(dir, { recursive: true, force: true });
  });

  let n = 0;
  const driverFor = (crash?: { verb: string; nth: number }) => {
    const crashDir = join(dir, `run-${++n}`);
    mkdirSync(crashDir);
    return new PodmanDriver({
      engine: crash ? join(dir, "podman") : "podman",
      env: { ...process.env, CRASH_DIR: crashDir, CRASH_VERB: crash?.verb ?? "", CRASH_NTH: String(crash?.nth ?? 0) },
      namePrefix: `${scope}-`,
      scope,
      stopTimeoutSec: 2,
      settleMs: 300,
      readyTimeoutMs: 5_000,
      // Shared by every driver of the file: the restarted agent reads what the killed one noted.
      loadsDir: join(dir, "loads"),
      blobs: new BlobFetcher({
        baseUrl: server.url,
        token: server.token,
        cacheDir: join(dir, "blobs"),
        retryDelayMs: 10,
      }),
    });
  };

  afterEach(async () => {
    const d = driverFor();
    for (const a of await d.list()) await d.remove(a);
  });

  const desired = (agents: ReturnType<typeof storedSpec>[]) => ({
    server_id: "s",
    generation: 1,
    lifecycle: "run" as const,
    agents,
  });
  const containers = async () =>
    (await podman("ps", "-a", "--format", "{{.Names}}", "--filter", `label=io.harbormaster.scope=${scope}`))
      .split("\n")
      .filter(Boolean);
  const imageIds = async () =>
    (await podman("images", "-q", "--no-trunc"))
      .split("\n")
      .filter(Boolean)
      .map((id) => id.replace(/^sha256:/, ""));
  const imageOf = async (name: string) => (await podman("inspect", "--format", "{{.Image}}", name)).trim();

  /** A pass the agent is killed in, at that command (it must have got that far). */
  const killedAt = async (want: ReturnType<typeof desired>, crash: { verb: string; nth: number }) => {
    await reconcile(want, driverFor(crash)).catch(() => null);
    expect(existsSync(join(dir, `run-${n}`, "dead"))).toBe(true);
  };

  /** Reconciles with a fresh driver (the restarted agent) until a pass changes nothing; at most 3 passes. */
  const converge = async (want: ReturnType<typeof desired>) => {
    const d = driverFor();
    for (let pass = 0; pass < 3; pass++) {
      const o = await reconcile(want, d);
      if (o.operations === 0) return o;
    }
    throw new Error("no fixed point after 3 passes");
  };

  const updateCases: { image: "v2" | "v2first"; verb: string; nth: number }[] = [
    { image: "v2", verb: "load", nth: 1 },
    { image: "v2", verb: "rename", nth: 1 },
    { image: "v2", verb: "start", nth: 1 },
    { image: "v2", verb: "rm", nth: 1 },
    { image: "v2first", verb: "start", nth: 1 },
    { image: "v2first", verb: "stop", nth: 1 },
    { image: "v2first", verb: "rename", nth: 2 },
    { image: "v2first", verb: "rm", nth: 2 },
  ];

  it.each(updateCases)(
    "an update to $image killed at $verb #$nth converges to the new version alone, its data kept",
    async ({ image, verb, nth }) => {
      const v1 = storedSpec("app", "1", blobs.v1);
      await reconcile(desired([v1]), driverFor());
      const base = `${scope}-app`;
      const v1Image = await imageOf(base);
      const v2 = storedSpec("app", "2", blobs[image], "oci-archive", v1.instance_id);
      await killedAt(desired([v2]), { verb, nth });

      const o = await converge(desired([v2]));
      expect(o.errors).toEqual([]);
      expect(o.agents.map((a) => [a.name, a.version, a.state])).toEqual([["app", "2", "running"]]);
      expect(await containers()).toEqual([base]);
      // The superseded image went with its container, as after an update nobody killed.
      expect(await imageIds()).not.toContain(v1Image);
      expect((await podman("exec", base, "cat", "/data/log")).trim().split("\n")).toEqual(
        expect.arrayContaining(["start 1", "start 2"]),
      );
    },
    30_000,
  );

  it.each([{ verb: "start", nth: 1 }])(
    "an install killed at $verb #$nth converges to one running container",
    async ({ verb, nth }) => {
      const v1 = storedSpec("app", "1", blobs.v1);
      await killedAt(desired([v1]), { verb, nth });
      const o = await converge(desired([v1]));
      expect(o.errors).toEqual([]);
      expect(o.agents.map((a) => [a.name, a.version, a.state])).toEqual([["app", "1", "running"]]);
      expect(await containers()).toEqual([`${scope}-app`]);
    },
  );

  it("an install killed after its load, under a config that then drops the agent, leaves no image behind", async () => {
    const before = await imageIds();
    const v1 = storedSpec("app", "1", blobs.v1);
    await killedAt(desired([v1]), { verb: "create", nth: 1 });
    // Loaded, and no container made from it yet: nothing names the image but the load.
    const loaded = (await imageIds()).filter((id) => !before.includes(id));
    expect(loaded.length).toBeGreaterThan(0);
    const o = await converge(desired([]));
    expect(o.errors).toEqual([]);
    expect(await containers()).toEqual([]);
    expect((await imageIds()).filter((id) => loaded.includes(id))).toEqual([]);
  });

  /** A driver that counts its `rmi` calls (the wrapper's count; it never dies at a millionth). */
  const countingRmi = () => {
    const d = driverFor({ verb: "rmi", nth: 1_000_000 });
    const seen = join(dir, `run-${n}`, "seen");
    return { d, rmis: () => (existsSync(seen) ? Number(readFileSync(seen, "utf8")) : 0) };
  };
  const notes = () => (existsSync(join(dir, "loads")) ? readdirSync(join(dir, "loads")) : []);

  it("a leftover note that cannot be removed fails no pass, and the other notes are still settled", async () => {
    const before = await imageIds();
    const v1 = storedSpec("app", "1", blobs.v1);
    await killedAt(desired([v1]), { verb: "create", nth: 1 });
    const loaded = (await imageIds()).filter((id) => !before.includes(id));
    // A leftover temporary that rm cannot take (a directory, not empty).
    const obstacle = join(dir, "loads", `.${"0".repeat(64)}.tmp`);
    mkdirSync(join(obstacle, "x"), { recursive: true });
    try {
      const o = await converge(desired([]));
      expect(o.errors).toEqual([]);
      expect((await imageIds()).filter((id) => loaded.includes(id))).toEqual([]);
      expect(notes()).toEqual([`.${"0".repeat(64)}.tmp`]);
    } finally {
      rmSync(obstacle, { recursive: true, force: true });
    }
  });

  it("an empty note (a power cut) is no note: the image it names is not removed on its word", async () => {
    const v1 = storedSpec("app", "1", blobs.v1);
    await killedAt(desired([v1]), { verb: "create", nth: 1 });
    const [note] = notes();
    expect(note).toMatch(/^[0-9a-f]{64}\.json$/);
    writeFileSync(join(dir, "loads", note), "");
    const { d, rmis } = countingRmi();
    const o = await reconcile(desired([v1]), d);
    expect(o.errors).toEqual([]);
    expect(o.agents.map((a) => [a.name, a.version, a.state])).toEqual([["app", "1", "running"]]);
    expect(rmis()).toBe(0);
    expect(notes()).toEqual([]);
  });

  it("a noted image that a container the agent does not manage uses is left to it, not retried every pass", async () => {
    const v1 = storedSpec("app", "1", blobs.v1);
    await killedAt(desired([v1]), { verb: "create", nth: 1 });
    const [note] = notes();
    const id = note.slice(0, 64);
    // Someone runs the loaded image by hand (labelled with the run's scope, for the clean-up only).
    const foreign = `${scope}-by-hand`;
    await podman("create", "--name", foreign, "--label", `io.harbormaster.scope=${scope}`, id, "true");
    try {
      const { d, rmis } = countingRmi();
      for (let pass = 0; pass < 3; pass++) expect((await reconcile(desired([]), d)).errors).toEqual([]);
      // Tried once (the engine refuses: in use), then the note is dropped: no rmi at the next passes.
      expect(rmis()).toBe(1);
      expect(notes()).toEqual([]);
      expect(await imageIds()).toContain(id);
      expect(await containers()).toEqual([foreign]);
    } finally {
      await podman("rm", "-f", foreign);
      await podman("rmi", id).catch(() => {});
    }
  });

  it("a container that exits right after its start is reported failed with its last words, never running", async () => {
    const crashy = storedSpec("crashy", "1", blobs.crashy);
    const o = await reconcile(desired([crashy]), driverFor());
    expect(o.agents).toEqual([]);
    expect(o.errors).toEqual([
      {
        agent: "crashy",
        op: "install",
        message: expect.stringMatching(
          /did not stay up after its start: exited with code 3; its last output: cannot read \/data\/app\.conf$/,
        ),
      },
    ]);
    // A failed install leaves no container behind; the next pass tries again and says so again.
    expect(await containers()).toEqual([]);

    // An update to it keeps the old version running, and says why.
    const v1 = storedSpec("app", "1", blobs.v1);
    await reconcile(desired([v1]), driverFor());
    const u = await reconcile(desired([{ ...crashy, name: "app", instance_id: v1.instance_id }]), driverFor());
    expect(u.agents.map((a) => [a.name, a.version, a.state])).toEqual([["app", "1", "running"]]);
    expect(u.errors).toEqual([
      {
        agent: "app",
        op: "update",
        message: expect.stringMatching(/did not stay up after its start: exited with code 3/),
      },
    ]);
  });
});
