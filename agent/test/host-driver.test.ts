import { chmod, mkdir, readFile, rm, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { reconcile } from "../driver.ts";
import { hostDriver } from "../drivers/index.ts";
import { BlobServer, buildImage, cleanPodman, newRunId, podman, sh, storedSpec, tempDir } from "./helpers.ts";

describe("hostDriver: containers and tarballs by the image's kind", () => {
  const scope = newRunId();
  const server = new BlobServer();
  let work: string;
  let oci: { id: string; digest: string; size: number };
  let tgz: { id: string; digest: string; size: number };

  beforeAll(async () => {
    await server.start();
    work = await tempDir("hm-host-driver-");
    const img = await buildImage({
      ref: `localhost/${scope}-web:1`,
      cmd: ["/bin/sh", "-c", "trap 'exit 0' TERM; while :; do sleep 0.2; done"],
    });
    oci = server.put(img.archive);
    const src = join(work, "src");
    await mkdir(join(src, "bin"), { recursive: true });
    // A tarball agent whose state is a marker file: enough to see the hooks run.
    const hooks: Record<string, string> = {
      install: "true",
      start: 'touch "$HM_DATA_DIR/up"',
      stop: 'rm -f "$HM_DATA_DIR/up"',
      status: '[ -e "$HM_DATA_DIR/up" ] && exit 0; exit 3',
      remove: "true",
    };
    for (const [h, body] of Object.entries(hooks)) {
      await writeFile(join(src, "bin", h), `#!/bin/sh\n${body}\n`);
      await chmod(join(src, "bin", h), 0o755);
    }
    await writeFile(
      join(src, "manifest.json"),
      JSON.stringify({
        name: "collector",
        version: "1",
        hooks: Object.fromEntries(Object.keys(hooks).map((h) => [h, `bin/${h}`])),
      }),
    );
    await sh("tar", ["-czf", join(work, "collector.tgz"), "-C", src, "."]);
    tgz = server.put(await readFile(join(work, "collector.tgz")));
  });

  afterAll(async () => {
    await server.stop();
    await cleanPodman(scope);
    await rm(work, { recursive: true, force: true });
  });

  const driver = (engine?: string) =>
    hostDriver({
      serverUrl: server.url,
      token: server.token,
      stateDir: join(work, "state"),
      root: join(work, "root"),
      namePrefix: `${scope}-`,
      scope,
      engine,
      stopTimeoutSec: 5,
    });

  it("installs each agent with its kind's driver, lists both, refuses a change of kind, and uninstalls both", async () => {
    const d = driver();
    const web = storedSpec("web", "1", oci);
    const collector = storedSpec("collector", "1", tgz, "tarball");
    const run = await reconcile({ server_id: "s", generation: 1, lifecycle: "run", agents: [web, collector] }, d);
    expect(run.errors).toEqual([]);
    expect(run.agents.map((a) => [a.name, a.version, a.state])).toEqual([
      ["collector", "1", "running"],
      ["web", "1", "running"],
    ]);
    expect(
      (await podman("ps", "--format", "{{.Names}}", "--filter", `label=io.harbormaster.scope=${scope}`)).trim(),
    ).toBe(`${scope}-web`);

    const moved = await reconcile(
      {
        server_id: "s",
        generation: 2,
        lifecycle: "run",
        agents: [web, { ...storedSpec("collector", "2", oci), instance_id: collector.instance_id }],
      },
      d,
    );
    expect(moved.errors).toEqual([
      { agent: "collector", op: "update", message: expect.stringMatching(/cannot change kind in place/) },
    ]);
    expect(moved.agents.map((a) => [a.name, a.version])).toEqual([
      ["collector", "1"],
      ["web", "1"],
    ]);

    const gone = await reconcile({ server_id: "s", generation: 3, lifecycle: "uninstall", agents: [] }, d);
    expect(gone).toMatchObject({ errors: [], agents: [] });
    expect((await podman("ps", "-a", "-q", "--filter", `label=io.harbormaster.scope=${scope}`)).trim()).toBe("");
  });

  it("on a host without the container engine, lists its tarball agents and fails container installs saying why", async () => {
    const d = driver(join(work, "no-such-engine"));
    const run = await reconcile(
      {
        server_id: "s",
        generation: 1,
        lifecycle: "run",
        agents: [storedSpec("web", "1", oci), storedSpec("collector", "1", tgz, "tarball")],
      },
      d,
    );
    expect(run.agents.map((a) => [a.name, a.state])).toEqual([["collector", "running"]]);
    expect(run.errors).toEqual([
      { agent: "web", op: "install", message: expect.stringMatching(/cannot run .*no-such-engine/) },
    ]);
    await reconcile({ server_id: "s", generation: 2, lifecycle: "uninstall", agents: [] }, d);
    expect(await d.list()).toEqual([]);
  });
});
