import { createHash, randomBytes } from "node:crypto";
import { lstat, mkdir, readdir, readFile, readlink, rename, rm, stat, symlink, writeFile } from "node:fs/promises";
import { join, resolve, sep } from "node:path";
import { z } from "zod";
import type { AgentSpec } from "../../src/model/server/schemas.ts";
import type { AgentDriver, ListedAgent, ReportedAgent } from "../driver.ts";
import type { BlobFetcher } from "./download.ts";
import { describeFailure, run } from "./exec.ts";
import { AGENT_NAME, catalogImage, reportable } from "./spec.ts";

export interface TarballDriverOptions {
  /** Downloads the tarballs (stored images); required to install or update. */
  blobs?: BlobFetcher;
  /** The file system root agents are kept under: <root>/opt/harbormaster/agents (default "/"). */
  root?: string;
  /** Most time a hook may take before its process group is killed, ms (default 60 s). */
  hookTimeoutMs?: number;
  /** Most of a hook's output kept for an error message, bytes (default 3000). */
  outputBytes?: number;
  /** The tar program (default "tar", GNU tar: it refuses members that climb out with ".."). */
  tar?: string;
  /** Extra environment for hooks. */
  env?: NodeJS.ProcessEnv;
}

const hookPath = z
  .string()
  .min(1)
  .max(512)
  .refine((p) => !p.startsWith("/") && !p.split("/").includes(".."), "a hook is a path inside the tarball");

/** manifest.json at the tarball's top: what it is and how to drive it. */
export const TarballManifest = z.object({
  name: z.string().min(1).max(128),
  version: z.string().min(1).max(128),
  hooks: z.object({
    install: hookPath,
    start: hookPath,
    stop: hookPath,
    status: hookPath,
    remove: hookPath,
    health: hookPath.optional(),
  }),
});
export type TarballManifest = z.infer<typeof TarballManifest>;
type Hook = keyof TarballManifest["hooks"];

/** What the driver writes beside an unpacked version: the desired config's words for it. */
const Installed = z.object({
  image: z.string(),
  version: z.string(),
  instance_id: z.string(),
  image_id: z.string(),
  digest: z.string(),
});
type Installed = z.infer<typeof Installed>;

const META = ".harbormaster.json";
const CURRENT = "current";
const DATA = "data";

/** A version's directory name: the version itself when it is a plain name, else a hash of it. */
const dirOf = (version: string) =>
  /^[A-Za-z0-9][A-Za-z0-9._+-]{0,127}$/.test(version) && version !== CURRENT && version !== DATA
    ? version
    : `v-${createHash("sha256").update(version).digest("hex").slice(0, 16)}`;

/** A hook's process ended otherwise than the caller needed. */
export class HookError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "HookError";
  }
}

/**
 * Agents packaged as tarballs with hooks, as Triton packages its agents: a verified tarball is
 * unpacked under <root>/opt/harbormaster/agents/NAME/VERSION, its manifest's hooks install,
 * start, stop, report on (LSB status: 0 running, 3 stopped, else failed) and remove it. NAME/
 * `current` points at the version in use; NAME/data is the agent's data, kept across versions
 * and removed only by remove(). Hooks run with a timeout (their process group is killed) and
 * their output's tail becomes the error message.
 */
export class TarballDriver implements AgentDriver {
  private readonly opts: TarballDriverOptions;
  readonly agentsDir: string;

  constructor(opts: TarballDriverOptions = {}) {
    this.opts = opts;
    this.agentsDir = join(opts.root ?? "/", "opt", "harbormaster", "agents");
  }

  private agentDir(name: string) {
    return join(this.agentsDir, name);
  }

  /** Runs one hook of an unpacked version; throws HookError with its output when it fails. */
  private async hook(
    dir: string,
    manifest: TarballManifest,
    hook: Hook,
    meta: Installed,
    name: string,
    ok: number[] = [0],
  ) {
    const rel = manifest.hooks[hook];
    if (rel === undefined) return 0;
    const file = resolve(dir, rel);
    if (!file.startsWith(resolve(dir) + sep)) throw new HookError(`${hook} hook ${rel} is outside the tarball`);
    const timeoutMs = this.opts.hookTimeoutMs ?? 60_000;
    const r = await run(file, [], {
      timeoutMs,
      cwd: dir,
      // A hook is judged by its exit status and reported by its output's tail: none of the rest is kept.
      maxStdout: 0,
      maxTail: this.opts.outputBytes ?? 3000,
      env: {
        ...process.env,
        ...this.opts.env,
        HM_AGENT_NAME: name,
        HM_AGENT_VERSION: meta.version,
        HM_AGENT_IMAGE: meta.image,
        HM_INSTANCE_ID: meta.instance_id,
        HM_AGENT_DIR: dir,
        HM_DATA_DIR: join(this.agentDir(name), DATA),
      },
    }).catch((err: Error) => {
      throw new HookError(`${name} ${meta.version}: ${hook} hook could not run: ${err.message}`);
    });
    if (r.timedOut || r.code === null || !ok.includes(r.code)) {
      throw new HookError(describeFailure(`${name} ${meta.version}: ${hook} hook`, r, timeoutMs));
    }
    return r.code;
  }

  /** An unpacked version: its manifest and the driver's record of it, or null when it is not one. */
  private async read(dir: string): Promise<{ manifest: TarballManifest; meta: Installed } | null> {
    try {
      const manifest = TarballManifest.parse(JSON.parse(await readFile(join(dir, "manifest.json"), "utf8")));
      const meta = Installed.parse(JSON.parse(await readFile(join(dir, META), "utf8")));
      return { manifest, meta };
    } catch {
      return null;
    }
  }

  /** The version an agent runs: NAME/current's target, read from the disk. */
  private async current(name: string) {
    const link = join(this.agentDir(name), CURRENT);
    const target = await readlink(link).catch(() => null);
    if (target === null) return null;
    const dir = join(this.agentDir(name), target);
    const v = await this.read(dir);
    return v ? { dir, ...v } : null;
  }

  /**
   * Before a pass (nothing of this driver is under way then): the temporaries a killed agent left
   * under each agent's directory (a half-unpacked `.unpack-*`, a `.current-*` link never renamed)
   * are deleted; they are never an agent's files. So are the version directories killed updates
   * left beside the current one (each kill would leave one more, and a rollout of many versions
   * would fill the disk): the current version and the newest other one, the previous version or
   * the update that was under way, are kept; the rest go. Only directories holding the driver's
   * record are versions: anything else under the agent's directory is left alone.
   */
  async beforePass() {
    const names = (await readdir(this.agentsDir).catch(() => [] as string[])).filter((n) => AGENT_NAME.test(n));
    for (const name of names) {
      const base = this.agentDir(name);
      const entries = await readdir(base).catch(() => [] as string[]);
      for (const e of entries) {
        if (/^\.(unpack|current)-[0-9a-f]{8}$/.test(e)) await rm(join(base, e), { recursive: true, force: true });
      }
      const current = await readlink(join(base, CURRENT)).catch(() => null);
      const others: { dir: string; at: number }[] = [];
      for (const e of entries) {
        if (e.startsWith(".") || e === CURRENT || e === DATA || e === current) continue;
        const at = await stat(join(base, e, META)).then(
          (st) => st.mtimeMs,
          () => null,
        );
        if (at !== null) others.push({ dir: join(base, e), at });
      }
      others.sort((a, b) => b.at - a.at);
      for (const { dir } of others.slice(1)) await rm(dir, { recursive: true, force: true });
    }
  }

  async list(): Promise<ListedAgent[]> {
    const names = (await readdir(this.agentsDir).catch(() => [] as string[])).filter((n) => AGENT_NAME.test(n)).sort();
    const out: ListedAgent[] = [];
    for (const name of names) {
      const cur = await this.current(name);
      if (!cur) continue;
      const agent: ListedAgent = {
        ...reportable(name, cur.meta.image, cur.meta.version, cur.meta.instance_id),
        state: "running",
      };
      try {
        const code = await this.hook(cur.dir, cur.manifest, "status", cur.meta, name, [0, 3]);
        if (code === 3) agent.state = "stopped";
        else if (cur.manifest.hooks.health) await this.hook(cur.dir, cur.manifest, "health", cur.meta, name);
      } catch (err) {
        agent.state = "failed";
        agent.reason = (err as Error).message;
      }
      out.push(agent);
    }
    return out;
  }

  /** Downloads, verifies and unpacks a spec's tarball into a fresh version directory beside any other. */
  private async unpack(spec: AgentSpec): Promise<{ dir: string; manifest: TarballManifest; meta: Installed }> {
    const img = catalogImage(spec);
    if (img === null || img.kind !== "tarball" || !("blob" in img.source)) {
      throw new Error(
        `image ${spec.image} ${spec.version} is not a tarball in the image catalog; the tarball driver installs only those`,
      );
    }
    if (!this.opts.blobs)
      throw new Error(`cannot download image ${spec.image}: this agent has no image store configured`);
    const file = await this.opts.blobs.fetch(img.source.blob, img.digest, img.size);
    const base = this.agentDir(spec.name);
    await mkdir(base, { recursive: true, mode: 0o755 });
    const tmp = join(base, `.unpack-${randomBytes(4).toString("hex")}`);
    try {
      await mkdir(tmp);
      const timeoutMs = this.opts.hookTimeoutMs ?? 60_000;
      const r = await run(this.opts.tar ?? "tar", ["-xf", file, "-C", tmp, "--no-same-owner"], { timeoutMs });
      if (r.code !== 0) throw new Error(describeFailure(`unpacking ${spec.image} ${spec.version}`, r, timeoutMs));
      let manifest: TarballManifest;
      try {
        manifest = TarballManifest.parse(JSON.parse(await readFile(join(tmp, "manifest.json"), "utf8")));
      } catch (err) {
        const why =
          err instanceof z.ZodError
            ? err.issues.map((i) => `${i.path.join(".")}: ${i.message}`).join("; ")
            : (err as Error).message;
        throw new Error(`${spec.image} ${spec.version}: manifest.json is missing or invalid: ${why}`);
      }
      if (manifest.version !== spec.version || (manifest.name !== spec.name && manifest.name !== spec.image)) {
        throw new Error(
          `the tarball is ${manifest.name} ${manifest.version}, not ${spec.image} ${spec.version}; nothing was installed`,
        );
      }
      for (const h of Object.values(manifest.hooks)) {
        if (h !== undefined && !(await lstat(resolve(tmp, h)).catch(() => null))?.isFile())
          throw new Error(`${spec.image} ${spec.version}: hook ${h} is not a file in the tarball`);
      }
      const meta: Installed = {
        image: spec.image,
        version: spec.version,
        instance_id: spec.instance_id,
        image_id: img.image_id,
        digest: img.digest,
      };
      await writeFile(join(tmp, META), JSON.stringify(meta));
      // The in-use version keeps its directory: a new one with the same name goes beside it.
      const cur = await readlink(join(base, CURRENT)).catch(() => null);
      let name = dirOf(spec.version);
      if (name === cur) name = `${name}~${img.digest.slice(7, 19)}`;
      const dir = join(base, name);
      // A directory left by an install that never finished (not the current one) is our own debris.
      await rm(dir, { recursive: true, force: true });
      await rename(tmp, dir);
      return { dir, manifest, meta };
    } finally {
      await rm(tmp, { recursive: true, force: true });
      await rm(file, { force: true });
    }
  }

  /** Points NAME/current at a version directory, atomically. */
  private async point(name: string, dir: string) {
    const base = this.agentDir(name);
    const tmp = join(base, `.current-${randomBytes(4).toString("hex")}`);
    await symlink(dir.slice(base.length + 1), tmp);
    await rename(tmp, join(base, CURRENT));
  }

  /** Unpacks the spec's version and runs its install hook; a version whose hook fails is removed. */
  private async unpackAndInstall(spec: AgentSpec) {
    const v = await this.unpack(spec);
    await mkdir(join(this.agentDir(spec.name), DATA), { recursive: true, mode: 0o750 });
    try {
      await this.hook(v.dir, v.manifest, "install", v.meta, spec.name);
    } catch (err) {
      await rm(v.dir, { recursive: true, force: true });
      throw err;
    }
    return v;
  }

  async install(spec: AgentSpec): Promise<void> {
    const v = await this.unpackAndInstall(spec);
    // Listed from here on: a crash before the start hook leaves a stopped agent the next pass starts.
    await this.point(spec.name, v.dir);
    try {
      await this.hook(v.dir, v.manifest, "start", v.meta, spec.name);
    } catch (err) {
      // A failed install leaves no version behind to be listed (the data dir stays: only remove() removes data).
      await this.hook(v.dir, v.manifest, "stop", v.meta, spec.name).catch(() => {});
      await rm(join(this.agentDir(spec.name), CURRENT), { force: true });
      await rm(v.dir, { recursive: true, force: true });
      throw err;
    }
  }

  /**
   * The new version is unpacked and installed beside the old, the old stopped, the new started;
   * the old version's directory goes only once the new one started. If it does not start, the
   * old one is started again and stays current.
   */
  async update(current: ReportedAgent, spec: AgentSpec): Promise<void> {
    const old = await this.current(current.name);
    if (!old) throw new Error(`${current.name} has no installed version to update`);
    const v = await this.unpackAndInstall(spec);
    try {
      await this.hook(old.dir, old.manifest, "stop", old.meta, current.name);
    } catch (err) {
      await rm(v.dir, { recursive: true, force: true });
      throw err;
    }
    await this.point(spec.name, v.dir);
    try {
      await this.hook(v.dir, v.manifest, "start", v.meta, spec.name);
    } catch (err) {
      await this.hook(v.dir, v.manifest, "stop", v.meta, spec.name).catch(() => {});
      await this.point(spec.name, old.dir);
      await this.hook(old.dir, old.manifest, "start", old.meta, current.name).catch(() => {});
      await rm(v.dir, { recursive: true, force: true });
      throw err;
    }
    await rm(old.dir, { recursive: true, force: true });
  }

  /** Stops the agent and runs its remove hook; only then is its directory (data included) deleted. */
  async remove(current: ReportedAgent): Promise<void> {
    const cur = await this.current(current.name);
    if (cur) {
      await this.hook(cur.dir, cur.manifest, "stop", cur.meta, current.name);
      await this.hook(cur.dir, cur.manifest, "remove", cur.meta, current.name);
    }
    await rm(this.agentDir(current.name), { recursive: true, force: true });
  }

  async start(current: ReportedAgent): Promise<void> {
    const cur = await this.current(current.name);
    if (!cur) throw new Error(`${current.name} is not installed`);
    await this.hook(cur.dir, cur.manifest, "start", cur.meta, current.name);
  }

  async stop(current: ReportedAgent): Promise<void> {
    const cur = await this.current(current.name);
    if (!cur) return;
    await this.hook(cur.dir, cur.manifest, "stop", cur.meta, current.name);
  }
}
