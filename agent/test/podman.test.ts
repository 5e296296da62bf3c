import { readdir, rm, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { reconcile } from "../driver.ts";
import { BlobFetcher, DigestMismatchError } from "../drivers/download.ts";
import { PodmanDriver } from "../drivers/podman.ts";
import type { DriverSpec } from "../drivers/spec.ts";
import {
  BlobServer,
  buildImage,
  buildImageSet,
  cleanPodman,
  eventually,
  newRunId,
  podman,
  sh,
  storedSpec,
  serve,
  tempDir,
  type ImageSet,
} from "./helpers.ts";

const SICK_CHECK = "if [ -e /tmp/sick ]; then echo sick: $(cat /tmp/sick); exit 1; fi";

describe("PodmanDriver (real podman)", () => {
  const scope = newRunId();
  const server = new BlobServer();
  let cache: string;
  let driver: PodmanDriver;
  let images: ImageSet<"v3sick" | "v3nostart" | "checked">["images"];
  let blobs: ImageSet<"v3sick" | "v3nostart" | "checked">["blobs"];

  beforeAll(async () => {
    await server.start();
    cache = await tempDir("hm-podman-state-");
    ({ images, blobs } = await buildImageSet(scope, server, {
      v3sick: {
        cmd: ["/bin/sh", "-c", "echo broken > /tmp/sick; exec sleep 1000"],
        volumes: ["/data"],
        labels: {
          "io.harbormaster.update": "start-first",
          "io.harbormaster.healthcheck": SICK_CHECK,
          "io.harbormaster.healthcheck-retries": "1",
        },
      },
      v3nostart: { cmd: ["/no/such/program"], volumes: ["/data"] },
      checked: {
        cmd: serve("hc"),
        volumes: ["/data"],
        labels: { "io.harbormaster.healthcheck": SICK_CHECK, "io.harbormaster.healthcheck-retries": "1" },
      },
    }));
    await writeFile(join(cache, "v1.tar"), images.v1.archive);
    driver = new PodmanDriver({
      namePrefix: `${scope}-`,
      scope,
      stopTimeoutSec: 5,
      settleMs: 500,
      readyTimeoutMs: 5_000,
      blobs: new BlobFetcher({
        baseUrl: server.url,
        token: server.token,
        cacheDir: join(cache, "blobs"),
        retryDelayMs: 10,
      }),
    });
  });

  afterAll(async () => {
    await server.stop();
    await cleanPodman(
      scope,
      Object.values(images ?? {}).map((i) => i.ref),
    );
    await rm(cache, { recursive: true, force: true });
  });

  // A failed test leaves nothing for the next one to see.
  afterEach(async () => {
    for (const a of await driver.list()) await driver.remove(a);
  });

  const inspect = async (name: string) =>
    JSON.parse(await podman("inspect", "--type", "container", name, "--format", "json"))[0];
  const dataLog = async (container: string) => (await podman("exec", container, "cat", "/data/log")).trim().split("\n");
  const volumesOf = async (agent: string) =>
    (
      await podman(
        "volume",
        "ls",
        "-q",
        "--filter",
        `label=io.harbormaster.agent=${agent}`,
        "--filter",
        `label=io.harbormaster.scope=${scope}`,
      )
    )
      .split("\n")
      .filter(Boolean);

  it("installs a stored oci-archive: downloads it with the server's token, loads it and runs a labelled container", async () => {
    const spec = storedSpec("web", "1", blobs.v1);
    await driver.install(spec);
    const c = await inspect(`${scope}-web`);
    expect(c.State.Status).toBe("running");
    expect(c.Config.Labels).toMatchObject({
      "io.harbormaster.agent": "web",
      "io.harbormaster.instance": spec.instance_id,
      "io.harbormaster.image": "web",
      "io.harbormaster.image-id": blobs.v1.id,
      "io.harbormaster.version": "1",
    });
    expect(
      server.requests.some((r) => r.path === spec.source.blob && r.authorization === `Bearer ${server.token}`),
    ).toBe(true);
    expect(await driver.list()).toEqual([
      { name: "web", image: "web", version: "1", instance_id: spec.instance_id, state: "running" },
    ]);
    // The data volume is a named volume of the agent's, so it outlives the container.
    expect(await volumesOf("web")).toEqual([`${scope}-web-data`]);
    // The archive is in the engine now; the cache does not keep a copy.
    expect(await readdir(join(cache, "blobs"))).toEqual([]);
    await driver.remove((await driver.list())[0]);
    expect(await volumesOf("web")).toEqual([]);
  });

  it("refuses a corrupted download: a digest error, nothing loaded, created or started", async () => {
    const corrupted = Buffer.from(images.v1.archive);
    corrupted[corrupted.length - 100] ^= 0xff;
    const blob = server.put(corrupted, blobs.v1.digest);
    const spec = storedSpec("bad", "1", blob);
    const err = await driver.install(spec).catch((e) => e);
    expect(err).toBeInstanceOf(DigestMismatchError);
    expect(await driver.list()).toEqual([]);
    expect((await podman("ps", "-a", "-q", "--filter", `name=${scope}-bad`)).trim()).toBe("");
    expect(await readdir(join(cache, "blobs"))).toEqual([]);
    // Through reconcile, it is the report's install error.
    const outcome = await reconcile({ server_id: "s", generation: 1, lifecycle: "run", agents: [spec] }, driver);
    expect(outcome.errors).toEqual([
      { agent: "bad", op: "install", message: expect.stringMatching(/does not match its digest/) },
    ]);
    expect(outcome.agents).toEqual([]);
  });

  it("updates stop-first by default: the old container stops before the new one starts, and the data volume carries over", async () => {
    const spec = storedSpec("db", "1", blobs.v1);
    await driver.install(spec);
    await podman("exec", `${scope}-db`, "sh", "-c", "echo kept > /data/mine");
    const oldImage = (await inspect(`${scope}-db`)).Image;
    const [current] = await driver.list();
    await driver.update(current, { ...storedSpec("db", "2", blobs.v2, "oci-archive", spec.instance_id) });
    expect(await driver.list()).toEqual([
      { name: "db", image: "db", version: "2", instance_id: spec.instance_id, state: "running" },
    ]);
    expect((await podman("exec", `${scope}-db`, "cat", "/data/mine")).trim()).toBe("kept");
    expect(await dataLog(`${scope}-db`)).toEqual(["start 1", "stop 1", "start 2"]);
    // The superseded catalog image left the store with its container.
    expect(
      await sh("podman", ["image", "exists", oldImage]).then(
        () => "exists",
        () => "gone",
      ),
    ).toBe("gone");
    // One container for the agent, no leftovers of the swap.
    expect(
      (await podman("ps", "-a", "--format", "{{.Names}}", "--filter", `label=io.harbormaster.scope=${scope}`)).trim(),
    ).toBe(`${scope}-db`);
    await driver.remove((await driver.list())[0]);
  });

  it("updates start-first when the image says so: the new container runs before the old one stops", async () => {
    const spec = storedSpec("api", "1", blobs.v1);
    await driver.install(spec);
    const [current] = await driver.list();
    await driver.update(current, storedSpec("api", "2", blobs.v2first, "oci-archive", spec.instance_id));
    expect((await driver.list()).map((a) => [a.version, a.state])).toEqual([["2", "running"]]);
    expect(await dataLog(`${scope}-api`)).toEqual(["start 1", "start 2", "stop 1"]);
    expect(
      (await podman("ps", "-a", "--format", "{{.Names}}", "--filter", `label=io.harbormaster.scope=${scope}`)).trim(),
    ).toBe(`${scope}-api`);
    await driver.remove((await driver.list())[0]);
  });

  it("keeps the old version running when a start-first update's new container is not healthy", async () => {
    const spec = storedSpec("edge", "1", blobs.v1);
    await driver.install(spec);
    const [current] = await driver.list();
    const err = await driver
      .update(current, storedSpec("edge", "3", blobs.v3sick, "oci-archive", spec.instance_id))
      .catch((e) => e);
    expect(err.message).toMatch(/not healthy.*sick: broken/);
    expect((await driver.list()).map((a) => [a.version, a.state])).toEqual([["1", "running"]]);
    expect(await dataLog(`${scope}-edge`)).toEqual(["start 1"]);
    await driver.remove((await driver.list())[0]);
  });

  it("puts the old container back when a stop-first update's new container cannot start", async () => {
    const spec = storedSpec("cron", "1", blobs.v1);
    await driver.install(spec);
    const [current] = await driver.list();
    const err = await driver
      .update(current, storedSpec("cron", "3", blobs.v3nostart, "oci-archive", spec.instance_id))
      .catch((e) => e);
    expect(err.message).toMatch(/podman start .*no\/such\/program|no such file/i);
    expect((await driver.list()).map((a) => [a.version, a.state])).toEqual([["1", "running"]]);
    expect(await dataLog(`${scope}-cron`)).toEqual(["start 1", "stop 1", "start 1"]);
    await driver.remove((await driver.list())[0]);
  });

  it("stop keeps the container and its volume; remove takes both", async () => {
    const spec = storedSpec("keep", "1", blobs.v1);
    await driver.install(spec);
    await podman("exec", `${scope}-keep`, "sh", "-c", "echo precious > /data/mine");
    const [current] = await driver.list();
    await driver.stop(current);
    expect(await driver.list()).toEqual([{ ...current, state: "stopped" }]);
    expect(await volumesOf("keep")).toEqual([`${scope}-keep-data`]);
    await driver.start(current);
    expect((await podman("exec", `${scope}-keep`, "cat", "/data/mine")).trim()).toBe("precious");
    await driver.remove(current);
    expect(await driver.list()).toEqual([]);
    expect(await volumesOf("keep")).toEqual([]);
  });

  it("reports an unhealthy container as failed with its check's output, and reconcile makes that the report's error", async () => {
    const spec = storedSpec("checked", "1", blobs.checked);
    await driver.install(spec);
    expect((await driver.list()).map((a) => a.state)).toEqual(["running"]);
    await podman("exec", `${scope}-checked`, "sh", "-c", "echo disk full > /tmp/sick");
    const [listed] = await driver.list();
    expect(listed).toMatchObject({
      name: "checked",
      state: "failed",
      reason: expect.stringMatching(/unhealthy: sick: disk full/),
    });
    const outcome = await reconcile({ server_id: "s", generation: 1, lifecycle: "run", agents: [spec] }, driver);
    expect(outcome.agents).toEqual([
      { name: "checked", image: "checked", version: "1", instance_id: spec.instance_id, state: "failed" },
    ]);
    expect(outcome.errors).toEqual([
      { agent: "checked", op: "start", message: expect.stringMatching(/sick: disk full/) },
    ]);
    await podman("exec", `${scope}-checked`, "rm", "/tmp/sick");
    expect((await driver.list()).map((a) => a.state)).toEqual(["running"]);
    await driver.remove((await driver.list())[0]);
  });

  it("lists a container killed by hand as failed, from the engine, and start brings it back", async () => {
    const spec = storedSpec("victim", "1", blobs.v1);
    await driver.install(spec);
    await podman("kill", `${scope}-victim`);
    const listed = await eventually(async () => {
      const l = await driver.list();
      return l[0]?.state === "failed" ? l[0] : null;
    });
    expect(listed.reason).toMatch(/exited with code 137 \(killed\)/);
    await driver.start(listed);
    expect((await driver.list()).map((a) => a.state)).toEqual(["running"]);
    await driver.remove(listed);
  });

  it("runs a free-form image the engine already has, under its own name, with an empty image-id label", async () => {
    const free = await buildImage({ ref: `localhost/${scope}-free:1`, cmd: serve("free"), keep: true });
    try {
      const spec = { name: "free", image: free.ref, version: "1", instance_id: "0d6c5c34-5d6f-4c5e-9d7e-7a9b1f0a0e11" };
      await driver.install(spec);
      expect(await driver.list()).toEqual([{ ...spec, state: "running" }]);
      expect((await inspect(`${scope}-free`)).Config.Labels["io.harbormaster.image-id"]).toBe("");
      // A container made by hand with the agent label is listed too, what its labels lack filled
      // in, so that one odd container cannot get the whole report refused.
      await podman(
        "create",
        "--name",
        `${scope}-hand`,
        "--label",
        "io.harbormaster.agent=hand",
        "--label",
        `io.harbormaster.scope=${scope}`,
        free.ref,
      );
      await podman(
        "create",
        "--name",
        `${scope}-Bad_Name`,
        "--label",
        "io.harbormaster.agent=Bad_Name",
        "--label",
        `io.harbormaster.scope=${scope}`,
        free.ref,
      );
      expect((await driver.list()).find((a) => a.name === "hand")).toEqual({
        name: "hand",
        image: free.ref,
        version: "unknown",
        instance_id: expect.stringMatching(/^[0-9a-f]{12}$/),
        state: "stopped",
      });
      expect((await driver.list()).map((a) => a.name)).toEqual(["free", "hand"]);
      await podman("rm", `${scope}-Bad_Name`);
      await driver.remove((await driver.list())[0]);
      // Not the catalog's: the operator's image stays.
      await sh("podman", ["image", "exists", free.ref]);
    } finally {
      await sh("podman", ["rmi", free.ref]).catch(() => {});
    }
  });

  it("installs an oci-ref pinned by digest (already in the store: no registry asked), and refuses one that is not pinned", async () => {
    const loaded = /Loaded image.*?: (\S+)/.exec(
      await sh("sh", ["-c", `podman load -q -i ${join(cache, "v1.tar")}`]),
    )![1];
    const digestRef = (
      JSON.parse(await podman("image", "inspect", loaded, "--format", "json"))[0].RepoDigests as string[]
    )[0];
    const digest = digestRef.slice(digestRef.indexOf("@") + 1);
    const base = {
      name: "pinned",
      image: "pinned",
      version: "1",
      instance_id: "5a3c1a5e-9f7b-4a39-8d55-0c1c2a7b9e01",
      image_id: "9b0e3b8e-2f1c-4d3a-8a7b-1c2d3e4f5a6b",
      kind: "oci-ref" as const,
      digest,
    };
    const unpinnedSpec: DriverSpec = { ...base, source: { ref: loaded } };
    const pinnedSpec: DriverSpec = { ...base, source: { ref: digestRef } };
    const unpinned = await driver.install(unpinnedSpec).catch((e) => e);
    expect(unpinned.message).toMatch(/not pinned to the image's digest.*nothing was pulled/);
    expect(await driver.list()).toEqual([]);
    await driver.install(pinnedSpec);
    expect((await driver.list()).map((a) => [a.name, a.state])).toEqual([["pinned", "running"]]);
    await driver.remove((await driver.list())[0]);
  });

  it("sees only its own containers: another prefix or scope on the same engine is not its agents'", async () => {
    const other = new PodmanDriver({
      namePrefix: `${scope}x-`,
      scope: `${scope}x`,
      blobs: (driver as unknown as { opts: { blobs: BlobFetcher } }).opts.blobs,
    });
    try {
      await other.install(storedSpec("neighbour", "1", blobs.v1));
      expect(await driver.list()).toEqual([]);
      expect((await other.list()).map((a) => a.name)).toEqual(["neighbour"]);
      await other.remove((await other.list())[0]);
    } finally {
      await cleanPodman(`${scope}x`);
    }
  });

  it("removing an agent keeps the volume of a same-named agent another prefix runs in the same scope", async () => {
    const other = new PodmanDriver({
      namePrefix: `${scope}y-`,
      scope,
      blobs: (driver as unknown as { opts: { blobs: BlobFetcher } }).opts.blobs,
    });
    const volumes = async () =>
      (await podman("volume", "ls", "--format", "{{.Name}}", "--filter", `label=io.harbormaster.scope=${scope}`))
        .split("\n")
        .filter((v) => v.includes("twin"))
        .sort();
    await driver.install(storedSpec("twin", "1", blobs.v1));
    await other.install(storedSpec("twin", "1", blobs.v1));
    expect(await volumes()).toEqual([`${scope}-twin-data`, `${scope}y-twin-data`]);
    const mine = (await driver.list()).find((a) => a.name === "twin")!;
    await driver.remove(mine);
    expect(await volumes()).toEqual([`${scope}y-twin-data`]);
    await other.remove((await other.list()).find((a) => a.name === "twin")!);
    expect(await volumes()).toEqual([]);
  });

  it("finishes an update a crash interrupted: the old container renamed away is the agent again", async () => {
    const spec = storedSpec("crash", "1", blobs.v1);
    await driver.install(spec);
    // As a stop-first update leaves it when killed between its rename and its create.
    await podman("stop", "-t", "5", `${scope}-crash`);
    await podman("rename", `${scope}-crash`, `${scope}-crash-OLD`);
    const [listed] = await driver.list();
    expect(listed).toMatchObject({ name: "crash", version: "1", state: "stopped" });
    await driver.update(listed, storedSpec("crash", "2", blobs.v2, "oci-archive", spec.instance_id));
    expect((await driver.list()).map((a) => [a.version, a.state])).toEqual([["2", "running"]]);
    expect(
      (await podman("ps", "-a", "--format", "{{.Names}}", "--filter", `label=io.harbormaster.scope=${scope}`)).trim(),
    ).toBe(`${scope}-crash`);
    await driver.remove((await driver.list())[0]);
  });
});
