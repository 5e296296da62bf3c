/**
 * The machine's drivers (agent/drivers/): containers through podman (or docker) and tarballs with
 * hooks, picked by the image's kind, sharing one verified download cache in the state directory.
 * A host without the container engine still runs tarball agents: its container driver lists
 * nothing and refuses installs, saying why.
 */
import { spawnSync } from "node:child_process";
import { join } from "node:path";
import type { AgentDriver } from "../driver.ts";
import { BlobFetcher, ByKindDriver, PodmanDriver, TarballDriver } from "../drivers/index.ts";
import type { DriverFactory } from "./run.ts";

/** A driver this host cannot offer: nothing of its kind is installed, and nothing can be. */
class UnavailableDriver implements AgentDriver {
  readonly why: string;
  constructor(why: string) {
    this.why = why;
  }
  async list() {
    return [];
  }
  private refuse(): never {
    throw new Error(this.why);
  }
  async install() {
    this.refuse();
  }
  async update() {
    this.refuse();
  }
  async remove() {
    this.refuse();
  }
  async start() {
    this.refuse();
  }
  async stop() {
    this.refuse();
  }
}

export const makeDrivers: DriverFactory = (config, identity, state, log) => {
  const blobs = new BlobFetcher({
    baseUrl: identity.url,
    token: identity.token,
    cacheDir: join(state.dir, "cache", "images"),
  });
  const engine = config.podman.engine;
  const probe = spawnSync(engine, ["--version"], { encoding: "utf8", timeout: 30_000 });
  let containers: AgentDriver;
  if (probe.status === 0) {
    containers = new PodmanDriver({
      engine,
      blobs,
      namePrefix: config.podman.name_prefix,
      scope: config.podman.scope ?? undefined,
      createArgs: config.podman.create_args,
      loadsDir: join(state.dir, "cache", "loads"),
    });
  } else {
    const why = `this host cannot run container images: ${engine} ${probe.error ? "is not installed" : `--version failed: ${(probe.stderr || "").trim().slice(0, 200)}`}`;
    log.warn(why);
    containers = new UnavailableDriver(why);
  }
  const tarballs = new TarballDriver({
    blobs,
    root: config.tarball.root,
    hookTimeoutMs: config.tarball.hook_timeout_s * 1000,
  });
  return new ByKindDriver({ containers, tarballs, blobs });
};
