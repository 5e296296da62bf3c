/**
 * The host agent's real drivers: OCI containers through podman (or docker), tarballs with hooks,
 * and the driver that picks between them by the image's kind. Node only.
 */
import { join } from "node:path";
import type { AgentSpec, DesiredConfig } from "../../src/model/server/schemas.ts";
import type { AgentDriver, Assignments, ListedAgent, ReportedAgent } from "../driver.ts";
import type { FetchLike } from "../http.ts";
import { BlobFetcher } from "./download.ts";
import { PodmanDriver } from "./podman.ts";
import { catalogImage } from "./spec.ts";
import { TarballDriver } from "./tarball.ts";

export { BlobFetcher, DigestMismatchError, type BlobFetcherOptions } from "./download.ts";
export { PodmanDriver, LABEL, type PodmanDriverOptions } from "./podman.ts";
export { TarballDriver, TarballManifest, HookError, type TarballDriverOptions } from "./tarball.ts";
export { catalogImage, IMAGE_KINDS, type CatalogImage, type DriverSpec, type ImageKind } from "./spec.ts";

export interface ByKindDriverOptions {
  /** Runs oci-archive and oci-ref images, and free-form ones (an image reference the engine knows). */
  containers: AgentDriver;
  /** Runs tarball images. */
  tarballs: AgentDriver;
  /** The drivers' shared download cache: pruned at each pass to what the desired config names. */
  blobs?: BlobFetcher;
}

/**
 * Picks the driver by the image's kind: tarballs to the tarball driver, everything else to the
 * container engine. Which driver holds an installed agent is read from their lists, never kept
 * from what was asked. An agent does not move between the two in an update: that is an
 * uninstall and an install, which only the control plane may order.
 */
export class ByKindDriver implements AgentDriver {
  private readonly opts: ByKindDriverOptions;
  private holders = new Map<string, AgentDriver>();

  constructor(opts: ByKindDriverOptions) {
    this.opts = opts;
  }

  private driverFor(spec: AgentSpec) {
    return catalogImage(spec)?.kind === "tarball" ? this.opts.tarballs : this.opts.containers;
  }

  async beforePass(desired: DesiredConfig) {
    await this.opts.blobs?.prune(desired.agents.map((a) => (a as { digest?: string }).digest));
    await this.opts.containers.beforePass?.(desired);
    await this.opts.tarballs.beforePass?.(desired);
  }

  async list(): Promise<ListedAgent[]> {
    const holders = new Map<string, AgentDriver>();
    const out: ListedAgent[] = [];
    // One after the other: each may run a health check per agent, on a small machine.
    for (const d of [this.opts.containers, this.opts.tarballs]) {
      for (const a of await d.list()) {
        // A name held by both (installed by hand?) is reported once, as the containers' (the report allows one).
        if (holders.has(a.name)) continue;
        holders.set(a.name, d);
        out.push(a);
      }
    }
    this.holders = holders;
    return out.sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
  }

  private async holder(name: string): Promise<AgentDriver> {
    if (!this.holders.has(name)) await this.list();
    const d = this.holders.get(name);
    if (!d) throw new Error(`${name} is not installed`);
    return d;
  }

  async install(spec: AgentSpec) {
    await this.driverFor(spec).install(spec);
  }

  async update(current: ReportedAgent, spec: AgentSpec) {
    const from = await this.holder(current.name);
    const to = this.driverFor(spec);
    if (from !== to) {
      const kinds = (d: AgentDriver) => (d === this.opts.tarballs ? "a tarball" : "a container");
      throw new Error(
        `${current.name} is installed as ${kinds(from)} and ${spec.image} ${spec.version} is ${kinds(to)}; ` +
          `the agent cannot change kind in place (remove it from the desired config, then add it again)`,
      );
    }
    await from.update(current, spec);
  }

  async remove(current: ReportedAgent) {
    await (await this.holder(current.name)).remove(current);
  }

  async start(current: ReportedAgent) {
    await (await this.holder(current.name)).start(current);
  }

  async stop(current: ReportedAgent) {
    await (await this.holder(current.name)).stop(current);
  }

  async assignments(): Promise<Assignments> {
    const units: string[] = [];
    const storage: string[] = [];
    for (const d of [this.opts.containers, this.opts.tarballs]) {
      const a = await d.assignments?.();
      if (a) {
        units.push(...a.units);
        storage.push(...a.storage);
      }
    }
    return { units, storage };
  }
}

export interface HostDriverOptions {
  /** The control plane's URL (stored images are downloaded from it). */
  serverUrl: string | URL;
  /** The server's token (hms.…), or a function returning the current one. */
  token: string | (() => string);
  /** The agent's state directory: downloads are cached in <stateDir>/cache/images, loads noted in <stateDir>/cache/loads. */
  stateDir: string;
  /** "podman" (default) or "docker", or a path to either. */
  engine?: string;
  /** Container name prefix (default "hm-"). */
  namePrefix?: string;
  /** Labels this agent's containers and volumes, so it sees only those (several agents on one engine: tests). */
  scope?: string;
  /** Extra `create` arguments for every container. */
  createArgs?: string[];
  /** Where tarball agents live: <root>/opt/harbormaster/agents (default "/"). */
  root?: string;
  /** A tarball hook's timeout, ms (default 60 s). */
  hookTimeoutMs?: number;
  /** Seconds a container has to stop before it is killed (default 10). */
  stopTimeoutSec?: number;
  fetch?: FetchLike;
}

/**
 * A host's drivers, sharing one verified download cache: the container engine's, the tarballs',
 * and the fetcher (for a caller that routes agents itself, as harbormaster-agent does).
 */
export function hostDrivers(opts: HostDriverOptions): {
  blobs: BlobFetcher;
  containers: PodmanDriver;
  tarballs: TarballDriver;
} {
  const blobs = new BlobFetcher({
    baseUrl: opts.serverUrl,
    token: opts.token,
    cacheDir: join(opts.stateDir, "cache", "images"),
    fetch: opts.fetch,
  });
  return {
    blobs,
    containers: new PodmanDriver({
      engine: opts.engine,
      blobs,
      namePrefix: opts.namePrefix,
      scope: opts.scope,
      createArgs: opts.createArgs,
      stopTimeoutSec: opts.stopTimeoutSec,
      loadsDir: join(opts.stateDir, "cache", "loads"),
    }),
    tarballs: new TarballDriver({ blobs, root: opts.root, hookTimeoutMs: opts.hookTimeoutMs }),
  };
}

/** The driver a host agent runs: containers and tarballs by the image's kind. */
export function hostDriver(opts: HostDriverOptions): ByKindDriver {
  return new ByKindDriver(hostDrivers(opts));
}
