import { mkdir, open, readdir, readFile, rename, rm } from "node:fs/promises";
import { join } from "node:path";
import type { AgentSpec, DesiredConfig } from "../../src/model/server/schemas.ts";
import type { AgentDriver, ListedAgent, ReportedAgent } from "../driver.ts";
import { sleep } from "../http.ts";
import type { BlobFetcher } from "./download.ts";
import { describeFailure, printable, run, type RunResult } from "./exec.ts";
import { AGENT_NAME, catalogImage, reportable } from "./spec.ts";

export const LABEL = {
  agent: "io.harbormaster.agent",
  instance: "io.harbormaster.instance",
  image: "io.harbormaster.image",
  imageId: "io.harbormaster.image-id",
  version: "io.harbormaster.version",
  /** Set only when the driver is given a scope: tells apart the containers of agents sharing one engine (tests). */
  scope: "io.harbormaster.scope",
  /** On an image: `start-first` lets an update run the new container beside the old one before stopping it. */
  update: "io.harbormaster.update",
  /**
   * On an image: a shell command that checks its health (OCI image configs have no HEALTHCHECK;
   * docker-format images' own healthcheck is used when this label is absent).
   */
  healthcheck: "io.harbormaster.healthcheck",
  /** On an image: consecutive failed checks before it counts as unhealthy (the engine's default otherwise). */
  healthRetries: "io.harbormaster.healthcheck-retries",
} as const;

export interface PodmanDriverOptions {
  /** The engine's CLI: "podman" (default) or "docker", or a path to either. */
  engine?: string;
  /** Downloads stored images (oci-archive); without it, only oci-ref and free-form images install. */
  blobs?: BlobFetcher;
  /** Containers are named `<namePrefix><agent>` (default "hm-"). */
  namePrefix?: string;
  /** Labels containers and volumes `io.harbormaster.scope=<scope>`; list() and remove() see only those. */
  scope?: string;
  /** Seconds a stopping container has before it is killed (default 10). */
  stopTimeoutSec?: number;
  /** Most time a transfer may take (a load, a pull), ms (default 10 min). */
  commandTimeoutMs?: number;
  /**
   * Most time any other engine command may take (ps, inspect, create, start, rename, rm), ms
   * (default 60 s; a stop gets its grace period on top). An engine that hangs (a stuck runtime, a
   * locked store) then fails the one operation, reported, instead of holding the loop for the
   * transfer's ten minutes on every call.
   */
  quickTimeoutMs?: number;
  /** Most time a healthcheck run may take, ms (default 60 s). */
  healthTimeoutMs?: number;
  /** A start-first update waits this long for the new container to be healthy (or running), ms (default 60 s). */
  readyTimeoutMs?: number;
  /** A new container without a healthcheck must still run after this long to count as started, ms (default 1 s). */
  settleMs?: number;
  /** Extra `create` arguments for every container (a network, devices), from the agent's configuration. */
  createArgs?: string[];
  /** The engine's environment (default: the agent's). */
  env?: NodeJS.ProcessEnv;
  /**
   * Where the driver notes each image it is about to load (under the agent's state directory),
   * until the desired config no longer names its digest and it is gone from the store (a note
   * outlives the container made from it: the engine refuses to remove an image a container holds,
   * and the note is kept until a later pass succeeds, unless the holder is a container this driver
   * does not manage, which takes the image over): an agent killed between a `load` and the
   * `create` that would use it leaves an image nothing names, which the next passes remove once
   * the desired config no longer wants it. Without it, such an image stays in the store.
   */
  loadsDir?: string;
}

/** A container of one of our agents, as the engine lists it. */
interface Container {
  id: string;
  name: string;
  labels: Record<string, string>;
  /** running, exited, created, paused, stopped, … (the engine's word). */
  state: string;
  exitCode: number;
  /** The engine's status line: "Up 3 minutes (healthy)", "Exited (1) 2 seconds ago". */
  status: string;
  /** The image's id, when the engine lists it (podman does). */
  imageId?: string;
  /** The image's name as the engine lists it. */
  image?: string;
}

interface ResolvedImage {
  /** What `create` is given: an image id (loaded archive) or a reference (pulled or free-form). */
  ref: string;
  labels: Record<string, string>;
  /** Paths the image declares as volumes: each becomes a named volume of the agent. */
  volumes: string[];
}

const NEW = "-NEW";
const OLD = "-OLD";

/**
 * Agents as OCI containers run by podman (or docker, whose CLI is the same). The machine's truth
 * is the engine's: list() asks it every time; a container carries its agent's name, instance,
 * image and version as labels. Stored images are downloaded and checked against their digest
 * before `load`; oci-refs are pulled by digest. An update starts the new container before stopping
 * the old when the image says it may (`io.harbormaster.update=start-first`), else stops, replaces
 * and starts, putting the old one back if the new one does not start. Data lives in named volumes
 * (one per path the image declares a VOLUME), labelled for the agent: kept by stop and update,
 * removed only by remove().
 */
export class PodmanDriver implements AgentDriver {
  private readonly opts: PodmanDriverOptions;
  private readonly engine: string;
  private readonly prefix: string;

  constructor(opts: PodmanDriverOptions = {}) {
    this.opts = opts;
    this.engine = opts.engine ?? "podman";
    this.prefix = opts.namePrefix ?? "hm-";
  }

  private nameOf(agent: string) {
    return `${this.prefix}${agent}`;
  }

  private get isDocker() {
    return /(^|\/)docker$/.test(this.engine);
  }

  /** Runs the engine; throws with its output when it fails (unless `allowFail`). */
  private async cli(args: string[], opts: { timeoutMs?: number; allowFail?: boolean } = {}): Promise<RunResult> {
    const timeoutMs = opts.timeoutMs ?? this.timeoutOf(args[0]);
    const r = await run(this.engine, args, { timeoutMs, env: this.opts.env });
    if (r.code !== 0 && !opts.allowFail)
      throw new Error(
        describeFailure(
          `${this.engine} ${args[0]}${args[1] && !args[1].startsWith("-") ? ` ${args[1]}` : ""}`,
          r,
          timeoutMs,
        ),
      );
    return r;
  }

  /** The bound of one engine command: a transfer's is long, a stop's has its grace period, the rest are quick. */
  private timeoutOf(verb: string | undefined) {
    if (verb === "load" || verb === "pull") return this.opts.commandTimeoutMs ?? 600_000;
    const quick = this.opts.quickTimeoutMs ?? 60_000;
    return verb === "stop" ? (this.opts.stopTimeoutSec ?? 10) * 1000 + quick : quick;
  }

  private filters(agent?: string) {
    const f = ["--filter", `label=${agent === undefined ? LABEL.agent : `${LABEL.agent}=${agent}`}`];
    if (this.opts.scope !== undefined) f.push("--filter", `label=${LABEL.scope}=${this.opts.scope}`);
    return f;
  }

  /** Our containers (all of them, or one agent's), as the engine lists them now. */
  private async containers(agent?: string): Promise<Container[]> {
    const r = await this.cli(["ps", "-a", "--no-trunc", ...this.filters(agent), "--format", "json"]).catch((err) => {
      // No engine on this host: it runs no containers (installing one still fails, saying so).
      if ((err as NodeJS.ErrnoException).code === "ENOENT") return null;
      throw err;
    });
    if (r === null) return [];
    return parsePs(r.stdout).filter((c) => this.manages(c));
  }

  /** Whether a listed container is one of this driver's (its scope's, when it has one). */
  private manages(c: Container) {
    const a = c.labels[LABEL.agent];
    // Only names this driver gives: another prefix's containers (another agent on this engine) are not ours.
    return (
      a !== undefined &&
      AGENT_NAME.test(a) &&
      [this.nameOf(a), this.nameOf(a) + NEW, this.nameOf(a) + OLD].includes(c.name) &&
      (this.opts.scope === undefined || c.labels[LABEL.scope] === this.opts.scope)
    );
  }

  async list(): Promise<ListedAgent[]> {
    let byAgent = this.byAgent(await this.containers());
    // An agent with more than its one container is an update a kill interrupted (the superseded
    // container not yet removed, the new one not yet renamed): finished before anything is
    // reported, so a pass that has nothing else to do does not leave it behind for good.
    const interrupted = [...byAgent].filter(([agent, cs]) => cs.some((c) => c.name !== this.nameOf(agent)));
    if (interrupted.length > 0) {
      // Best effort: what cannot be finished now is listed as it stands (current() picks the
      // agent's container) and tried again by the next install, update or start.
      for (const [agent] of interrupted) await this.recover(agent, { dropImages: true }).catch(() => {});
      byAgent = this.byAgent(await this.containers());
    }
    const out: ListedAgent[] = [];
    for (const [agent, cs] of [...byAgent].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))) {
      const c = this.current(agent, cs);
      if (c) out.push(await this.describe(agent, c));
    }
    return out;
  }

  private byAgent(cs: Container[]) {
    const byAgent = new Map<string, Container[]>();
    for (const c of cs) {
      const a = c.labels[LABEL.agent];
      byAgent.set(a, [...(byAgent.get(a) ?? []), c]);
    }
    return byAgent;
  }

  /**
   * Which of an agent's containers is the agent: the one with its name; mid-update (a crash
   * between two steps), the new one if it runs, else the old one.
   */
  private current(agent: string, cs: Container[]): Container | undefined {
    const base = this.nameOf(agent);
    return (
      cs.find((c) => c.name === base) ??
      cs.find((c) => c.name === base + NEW && c.state === "running") ??
      cs.find((c) => c.name === base + OLD) ??
      cs.find((c) => c.name === base + NEW)
    );
  }

  private async describe(agent: string, c: Container): Promise<ListedAgent> {
    const reported: ListedAgent = {
      ...reportable(
        agent,
        c.labels[LABEL.image] || c.image,
        c.labels[LABEL.version],
        c.labels[LABEL.instance] || c.id.slice(0, 12),
      ),
      state: "stopped",
    };
    if (c.state === "running") {
      const health = await this.health(c);
      if (health === null) reported.state = "running";
      else Object.assign(reported, { state: "failed", reason: health });
    } else if (c.state === "exited" && c.exitCode !== 0) {
      Object.assign(reported, {
        state: "failed",
        reason: `container ${c.name} exited with code ${c.exitCode}${c.exitCode === 137 ? " (killed)" : ""}`,
      });
    }
    return reported;
  }

  /**
   * Null when a running container is healthy (or starting, or has no healthcheck); else why not.
   */
  private async health(c: Container): Promise<string | null> {
    const h = await this.healthOf(c);
    return h.status === "unhealthy" ? `container ${c.name} is unhealthy${h.output ? `: ${h.output}` : ""}` : null;
  }

  /**
   * A running container's health, checked now. Podman runs healthchecks from systemd timers,
   * which a host without systemd (or a container started outside it) does not have: the check is
   * run here each time the agent looks; the engine's verdict (after the check's retries) counts.
   */
  private async healthOf(
    c: Container,
  ): Promise<{ status: "none" | "starting" | "healthy" | "unhealthy"; output: string }> {
    if (!/\((healthy|unhealthy|starting|health: starting)\)\s*$/.test(c.status)) return { status: "none", output: "" };
    if (!this.isDocker) {
      const timeoutMs = this.opts.healthTimeoutMs ?? 60_000;
      const r = await this.cli(["healthcheck", "run", c.id], { timeoutMs, allowFail: true });
      if (r.timedOut)
        return { status: "unhealthy", output: `the healthcheck timed out after ${Math.round(timeoutMs / 1000)} s` };
    }
    const r = await this.cli(["container", "inspect", c.id], { allowFail: true });
    try {
      const state = JSON.parse(r.stdout)[0]?.State ?? {};
      const h = state.Health ?? state.Healthcheck ?? {};
      const last = Array.isArray(h.Log) ? h.Log[h.Log.length - 1] : undefined;
      const output =
        printable(String(last?.Output ?? ""))
          .trim()
          .slice(-2000) || (last ? `the check exited with code ${last.ExitCode}` : "");
      const status = h.Status === "healthy" || h.Status === "unhealthy" ? h.Status : "starting";
      return { status, output };
    } catch {
      return { status: "starting", output: "" };
    }
  }

  async install(spec: AgentSpec): Promise<void> {
    const image = await this.resolve(spec);
    await this.recover(spec.name);
    const name = this.nameOf(spec.name);
    await this.create(name, spec, image);
    try {
      await this.cli(["start", name]);
      await this.settled(name);
    } catch (err) {
      // A failed install leaves no container behind (its volumes stay: only remove() removes data).
      await this.discard(name);
      throw err;
    }
  }

  async update(current: ReportedAgent, spec: AgentSpec): Promise<void> {
    // The new image is downloaded, verified and loaded before anything of the old one is touched.
    const image = await this.resolve(spec);
    await this.recover(current.name);
    const name = this.nameOf(current.name);
    if (image.labels[LABEL.update] === "start-first") await this.startFirst(name, spec, image);
    else await this.stopFirst(name, spec, image);
  }

  /** No downtime: the new container runs (and is healthy) before the old one stops. */
  private async startFirst(name: string, spec: AgentSpec, image: ResolvedImage) {
    await this.discard(name + NEW);
    await this.create(name + NEW, spec, image);
    try {
      await this.cli(["start", name + NEW]);
      await this.ready(name + NEW);
    } catch (err) {
      await this.discard(name + NEW);
      throw err;
    }
    await this.cli(["stop", "-t", String(this.opts.stopTimeoutSec ?? 10), name]);
    await this.cli(["rename", name, name + OLD]);
    await this.cli(["rename", name + NEW, name]);
    await this.retire(name + OLD);
  }

  /** Stop, replace, start; the old container is put back and started when the new one will not start. */
  private async stopFirst(name: string, spec: AgentSpec, image: ResolvedImage) {
    const before = (await this.containers(spec.name)).find((c) => c.name === name);
    await this.cli(["stop", "-t", String(this.opts.stopTimeoutSec ?? 10), name]);
    await this.cli(["rename", name, name + OLD]);
    try {
      await this.create(name, spec, image);
      await this.cli(["start", name]);
      await this.settled(name);
    } catch (err) {
      await this.discard(name);
      await this.cli(["rename", name + OLD, name], { allowFail: true });
      if (before?.state === "running") await this.cli(["start", name], { allowFail: true });
      throw err;
    }
    await this.retire(name + OLD);
  }

  /**
   * Removes a superseded container, and its image when it came from the catalog and nothing else
   * uses it (the engine refuses to remove an image in use): rollouts do not fill the disk.
   */
  private async retire(name: string) {
    const c = (await this.containers()).find((x) => x.name === name);
    await this.cli(["rm", "-v", name]);
    await this.dropImage(c);
  }

  private async dropImage(c: Container | undefined) {
    if (c?.imageId && c.labels[LABEL.imageId]) await this.cli(["rmi", c.imageId], { allowFail: true });
  }

  /**
   * A just-started container must still run after settleMs: one that exits at once (a crash
   * loop, a bad configuration) fails its install, update or start, with its last words, instead of
   * being reported running for the instant `start` returned.
   */
  private async settled(name: string) {
    await sleep(this.opts.settleMs ?? 1000);
    const c = (await this.containers()).find((x) => x.name === name);
    if (c?.state === "running") return;
    const logs = await this.cli(["logs", "--tail", "5", name], { allowFail: true });
    const said = logs.code === 0 ? printable(logs.tail).trim().slice(-500) : "";
    throw new Error(
      `container ${name} did not stay up after its start: ${!c ? "it is gone" : c.state === "exited" ? `exited with code ${c.exitCode}` : c.status || c.state}${said ? `; its last output: ${said}` : ""}`,
    );
  }

  /** Waits until a just-started container is healthy (with a healthcheck) or still running after settleMs. */
  private async ready(name: string) {
    const deadline = Date.now() + (this.opts.readyTimeoutMs ?? 60_000);
    await sleep(this.opts.settleMs ?? 1000);
    for (;;) {
      const c = (await this.containers()).find((x) => x.name === name);
      if (!c) throw new Error(`container ${name} disappeared while starting`);
      if (c.state !== "running") throw new Error(`the new container did not stay up: ${c.status}`);
      const h = await this.healthOf(c);
      if (h.status === "none" || h.status === "healthy") return;
      if (Date.now() > deadline) {
        throw new Error(
          `the new container was not healthy within ${Math.round((this.opts.readyTimeoutMs ?? 60_000) / 1000)} s${h.output ? `: ${h.output}` : ""}`,
        );
      }
      await sleep(1000);
    }
  }

  /** Removes containers at once (half-made or superseded ones: nothing to stop gracefully). */
  private async discard(...names: string[]) {
    await this.cli(["rm", "-f", ...(this.isDocker ? [] : ["-t", "0"]), ...names], { allowFail: true });
  }

  async remove(current: ReportedAgent): Promise<void> {
    // Stopped gracefully first (the agent may flush its data), then removed with its volumes.
    await this.stop(current);
    const cs = await this.containers(current.name);
    if (cs.length > 0) await this.cli(["rm", "-f", "-v", ...cs.map((c) => c.id)]);
    const vols = await this.volumes(current.name);
    if (vols.length > 0) await this.cli(["volume", "rm", "-f", ...vols]);
    for (const c of cs) await this.dropImage(c);
  }

  async start(current: ReportedAgent): Promise<void> {
    await this.recover(current.name);
    await this.cli(["start", this.nameOf(current.name)]);
    await this.settled(this.nameOf(current.name));
  }

  async stop(current: ReportedAgent): Promise<void> {
    const running = (await this.containers(current.name)).filter((c) => c.state === "running" || c.state === "paused");
    if (running.length > 0)
      await this.cli(["stop", "-t", String(this.opts.stopTimeoutSec ?? 10), ...running.map((c) => c.id)]);
  }

  /**
   * Finishes what a crash interrupted between two steps of an update: the agent's container is
   * given its name back (the new one if it started, else the old), and a superseded one is
   * removed (never a volume); with `dropImages`, its catalog image too, as retire() does.
   */
  private async recover(agent: string, { dropImages = false } = {}) {
    const cs = await this.containers(agent);
    const base = this.nameOf(agent);
    if (!cs.some((c) => c.name === base)) {
      const keep = this.current(agent, cs);
      if (keep) await this.cli(["rename", keep.id, base]);
    }
    const stale = (await this.containers(agent)).filter((c) => c.name !== base);
    if (stale.length > 0) await this.discard(...stale.map((c) => c.id));
    // Not within an install or update: the image it just loaded has no container yet, and would go.
    if (dropImages) for (const c of stale) await this.dropImage(c);
  }

  /** The image a spec names, present in the engine's store and checked, as `create` takes it. */
  private async resolve(spec: AgentSpec): Promise<ResolvedImage> {
    const img = catalogImage(spec);
    let ref: string;
    if (img === null) {
      // A free-form image: the engine's name for it (pulled if missing, as the engine does).
      ref = spec.image;
      if ((await this.cli(["image", "inspect", ref], { allowFail: true })).code !== 0) await this.cli(["pull", ref]);
    } else if (img.kind === "tarball") {
      throw new Error(`image ${spec.image} ${spec.version} is a tarball, not a container image`);
    } else if ("ref" in img.source) {
      const at = img.source.ref.lastIndexOf("@");
      if (at < 0 || img.source.ref.slice(at + 1) !== img.digest) {
        throw new Error(
          `oci-ref ${img.source.ref} is not pinned to the image's digest ${img.digest}; nothing was pulled`,
        );
      }
      ref = img.source.ref;
      // Named by its digest, an image already in the store is that image: no need to ask the registry.
      if ((await this.cli(["image", "inspect", ref], { allowFail: true })).code !== 0) await this.cli(["pull", ref]);
    } else {
      if (!this.opts.blobs)
        throw new Error(`cannot download image ${spec.image}: this agent has no image store configured`);
      const file = await this.opts.blobs.fetch(img.source.blob, img.digest, img.size);
      try {
        await this.noteLoad(file, img.digest);
        const r = await this.cli(["load", "-i", file]);
        const loaded = /Loaded image(?:\(s\))?(?: ID)?:\s*(\S+?)(?:,|\s|$)/.exec(r.stdout + "\n" + r.stderr)?.[1];
        if (!loaded) throw new Error(`${this.engine} load did not say which image it loaded: ${r.tail.trim()}`);
        ref = loaded;
      } finally {
        // Loaded (or unloadable): the engine keeps the image, the cache need not.
        await rm(file, { force: true });
      }
    }
    const r = await this.cli(["image", "inspect", ref]);
    const meta = firstInspected(r.stdout, "image inspect") as {
      Id?: unknown;
      Labels?: Record<string, string>;
      Config?: { Labels?: Record<string, string>; Volumes?: Record<string, unknown> };
    };
    const config = meta.Config ?? {};
    return {
      // A loaded archive is created from its id: a tag can be moved by the next load.
      ref: img !== null && img.kind === "oci-archive" ? String(meta.Id ?? ref) : ref,
      labels: { ...meta.Labels, ...config.Labels },
      volumes: Object.keys(config.Volumes ?? {}).sort(),
    };
  }

  /**
   * Notes the image an archive holds before it is loaded, when the store does not have it yet:
   * its id is the digest of its config (what podman names an image by), read from the archive's
   * OCI layout. An archive that does not say is loaded unnoted, as before.
   */
  private async noteLoad(file: string, digest: string) {
    const dir = this.opts.loadsDir;
    if (!dir) return;
    const id = await archiveImageId(file).catch(() => null);
    if (!id || (await this.cli(["image", "inspect", id], { allowFail: true })).code === 0) return;
    await mkdir(dir, { recursive: true, mode: 0o700 });
    const tmp = join(dir, `.${id}.tmp`);
    // Flushed before the rename, and the rename before the load: after a power cut the note is
    // there whole or not at all (an empty one would pass for no note, and the image go unnoted).
    const note = await open(tmp, "w", 0o600);
    try {
      await note.writeFile(JSON.stringify({ id, digest }));
      await note.sync();
    } finally {
      await note.close();
    }
    await rename(tmp, join(dir, `${id}.json`));
    const d = await open(dir, "r");
    try {
      await d.sync();
    } finally {
      await d.close();
    }
  }

  /**
   * Removes the images loaded for digests the desired config no longer names that no container
   * holds (the engine refuses to remove one in use), and forgets a noted image once it is gone.
   */
  async beforePass(desired: DesiredConfig) {
    const dir = this.opts.loadsDir;
    if (!dir) return;
    const wanted = new Set(desired.agents.map((a) => (a as { digest?: string }).digest));
    for (const name of await readdir(dir).catch(() => [] as string[])) {
      try {
        await this.settleNote(dir, name, wanted);
      } catch {
        // Best effort, never the pass's failure (no engine on this host now, a file in the way):
        // the note waits for the next pass.
      }
    }
  }

  private async settleNote(dir: string, name: string, wanted: Set<string | undefined>) {
    const path = join(dir, name);
    if (!/^[0-9a-f]{64}\.json$/.test(name)) {
      // A note a kill left half written.
      if (/^\.[0-9a-f]{64}\.tmp$/.test(name)) await rm(path, { force: true });
      return;
    }
    const digest = noteDigest(await readFile(path, "utf8"));
    // Empty or garbled (a disk that lost it): no note. Removing the image on its word would
    // only have the next install load it again, were it still wanted.
    if (digest === null) return rm(path, { force: true });
    if (wanted.has(digest)) return;
    const id = name.slice(0, 64);
    await this.cli(["rmi", id], { allowFail: true });
    if ((await this.cli(["image", "inspect", id], { allowFail: true })).code !== 0) return rm(path, { force: true });
    // Still there: held by a container. One of ours goes (and the image with it, or at a later
    // pass) as the desired config says; one we do not manage is someone else's use of the image,
    // whose removal is no longer ours: the note is dropped, not retried every pass for as long
    // as that container lives.
    const r = await this.cli(["ps", "-a", "--no-trunc", "--filter", `ancestor=${id}`, "--format", "json"]);
    if (parsePs(r.stdout).some((c) => !this.manages(c))) await rm(path, { force: true });
  }

  /** Creates an agent's container (not started), its volumes first. */
  private async create(name: string, spec: AgentSpec, image: ResolvedImage) {
    const labels: Record<string, string> = {
      [LABEL.agent]: spec.name,
      [LABEL.instance]: spec.instance_id,
      [LABEL.image]: spec.image,
      [LABEL.imageId]: catalogImage(spec)?.image_id ?? "",
      [LABEL.version]: spec.version,
    };
    if (this.opts.scope !== undefined) labels[LABEL.scope] = this.opts.scope;
    const mounts: string[] = [];
    for (const path of image.volumes) {
      const vol = `${this.nameOf(spec.name)}-${slug(path)}`;
      if ((await this.cli(["volume", "inspect", vol], { allowFail: true })).code !== 0) {
        const vlabels = [LABEL.agent, LABEL.scope]
          .filter((k) => labels[k] !== undefined)
          .flatMap((k) => ["--label", `${k}=${labels[k]}`]);
        await this.cli(["volume", "create", ...vlabels, vol]);
      }
      mounts.push("-v", `${vol}:${path}`);
    }
    await this.cli([
      "create",
      "--name",
      name,
      ...Object.entries(labels).flatMap(([k, v]) => ["--label", `${k}=${v}`]),
      ...mounts,
      ...healthArgs(image.labels),
      ...(this.opts.createArgs ?? []),
      image.ref,
    ]);
  }

  /**
   * The names of an agent's volumes: labelled as its own and named as this driver names them, so
   * removing an agent never takes the data of another driver's agent of the same name on this engine.
   */
  private async volumes(agent: string): Promise<string[]> {
    const r = await this.cli(["volume", "ls", ...this.filters(agent), "--format", "{{.Name}}"]);
    const prefix = `${this.nameOf(agent)}-`;
    return r.stdout
      .split("\n")
      .map((s) => s.trim())
      .filter((name) => name.startsWith(prefix));
  }
}

function healthArgs(labels: Record<string, string>): string[] {
  const cmd = labels[LABEL.healthcheck];
  if (!cmd) return [];
  const retries = labels[LABEL.healthRetries];
  return ["--health-cmd", cmd, ...(retries && /^[1-9][0-9]{0,2}$/.test(retries) ? ["--health-retries", retries] : [])];
}

const isObject = (v: unknown): v is Record<string, unknown> => typeof v === "object" && v !== null && !Array.isArray(v);

/** An engine that answers what is not its JSON (a wrapper's warning on stdout, a broken build): said with what it said. */
const notEngineJson = (verb: string, text: string) =>
  new Error(
    `the engine's ${verb} did not answer its JSON: ${JSON.stringify(text.slice(0, 200))}${text.length > 200 ? "…" : ""}`,
  );

function engineJson(text: string, verb: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    throw notEngineJson(verb, text);
  }
}

/** The first object of an `inspect` answer (an array of one). */
export function firstInspected(stdout: string, verb: string): Record<string, unknown> {
  const v = engineJson(stdout.trim(), verb);
  if (!Array.isArray(v) || !isObject(v[0])) throw notEngineJson(verb, stdout.trim());
  return v[0];
}

/**
 * The id the engine gives the image an OCI archive holds: its config's digest, found through the
 * archive's index.json and the manifest it names. Null when the archive is not laid out so.
 */
async function archiveImageId(file: string): Promise<string | null> {
  const member = async (path: string) => {
    const r = await run("tar", ["-xOf", file, path], { timeoutMs: 60_000, maxStdout: 1024 * 1024 });
    if (r.code !== 0) throw new Error(`no ${path} in the archive`);
    return JSON.parse(r.stdout) as unknown;
  };
  const sha = (d: unknown) => (typeof d === "string" ? /^sha256:([0-9a-f]{64})$/.exec(d)?.[1] : undefined);
  const index = (await member("index.json")) as { manifests?: { digest?: unknown }[] };
  const manifest = sha(index.manifests?.length === 1 ? index.manifests[0].digest : undefined);
  if (!manifest) return null;
  const m = (await member(`blobs/sha256/${manifest}`)) as { config?: { digest?: unknown } };
  return sha(m.config?.digest) ?? null;
}

/** The digest a load's note names, or null for a note that is not one (empty, cut short, garbled). */
function noteDigest(text: string): string | null {
  try {
    const note = JSON.parse(text) as { digest?: unknown } | null;
    return typeof note?.digest === "string" ? note.digest : null;
  } catch {
    return null;
  }
}

/** A volume name's part for a path: /var/lib/x → var-lib-x. */
function slug(path: string) {
  return path.replace(/[^A-Za-z0-9_.-]+/g, "-").replace(/^[-.]+|-+$/g, "") || "root";
}

/** `ps --format json`: podman prints an array, docker one object per line; fields differ a little. */
export function parsePs(stdout: string): Container[] {
  const text = stdout.trim();
  if (!text) return [];
  const rows = text.startsWith("[") ? engineJson(text, "ps") : text.split("\n").map((l) => engineJson(l, "ps"));
  if (!Array.isArray(rows) || !rows.every(isObject)) throw notEngineJson("ps", text);
  return rows.map((r) => {
    const names = Array.isArray(r.Names) ? (r.Names as string[]) : String(r.Names ?? "").split(",");
    const labels =
      typeof r.Labels === "string"
        ? Object.fromEntries(
            (r.Labels as string)
              .split(",")
              .filter(Boolean)
              .map((kv) => [kv.slice(0, kv.indexOf("=")), kv.slice(kv.indexOf("=") + 1)]),
          )
        : ((r.Labels ?? {}) as Record<string, string>);
    const status = String(r.Status ?? "");
    const exitCode = typeof r.ExitCode === "number" ? r.ExitCode : Number(/^Exited \((\d+)\)/.exec(status)?.[1] ?? 0);
    return {
      id: String(r.Id ?? r.ID ?? ""),
      name: names[0] ?? "",
      labels,
      state: String(r.State ?? "").toLowerCase(),
      exitCode,
      status,
      imageId: typeof r.ImageID === "string" && r.ImageID ? r.ImageID : undefined,
      image: typeof r.Image === "string" && r.Image ? r.Image : undefined,
    };
  });
}
