import { createHash, randomBytes, randomUUID } from "node:crypto";
import { chmod, mkdir, mkdtemp, readFile, rm, symlink, writeFile } from "node:fs/promises";
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import type { DesiredConfig } from "../../src/model/server/schemas.ts";
import { HostAgent, type LoopState } from "../agent.ts";
import type { AgentDriver } from "../driver.ts";
import { run } from "../drivers/exec.ts";
import type { Report, ReportAccepted } from "../host-api.ts";
import type { DriverSpec } from "../drivers/spec.ts";

/** A short id for one test file's run: names and labels carry it, so parallel runs never meet. */
export const newRunId = () => `hmt${randomBytes(3).toString("hex")}`;

export async function tempDir(prefix = "hm-agent-test-") {
  return mkdtemp(join(tmpdir(), prefix));
}

/** Runs a command to completion; throws with its output when it fails. */
export async function sh(cmd: string, args: string[], timeoutMs = 120_000) {
  const r = await run(cmd, args, { timeoutMs, maxTail: 4000 });
  if (r.code !== 0) throw new Error(`${cmd} ${args.join(" ")} failed (${r.code}): ${r.tail}`);
  return r.stdout;
}

export const podman = (...args: string[]) => sh("podman", args);

export interface BuiltImage {
  /** Its tag while it was built (removed from the store again: installs load it from the archive). */
  ref: string;
  archive: Buffer;
  digest: string;
  size: number;
}

export interface ImageRecipe {
  ref: string;
  cmd: string[];
  labels?: Record<string, string>;
  volumes?: string[];
  /** Extra files in the image: path → content. */
  files?: Record<string, string>;
  /** Leave the image in the store (a free-form image the engine already has). */
  keep?: boolean;
}

const BUSYBOX = "/bin/busybox";

/**
 * An OCI archive built from Debian's busybox-static (no registry needed): a root filesystem of
 * /bin/busybox and its applets, imported with the recipe's CMD, labels and volumes, saved as an
 * oci-archive, and removed from the store again.
 */
export async function buildImage(recipe: ImageRecipe): Promise<BuiltImage> {
  const dir = await tempDir("hm-image-");
  try {
    const root = join(dir, "rootfs");
    await mkdir(join(root, "bin"), { recursive: true });
    for (const d of ["tmp", "data", "etc"]) await mkdir(join(root, d), { recursive: true });
    await writeFile(join(root, "bin", "busybox"), await readFile(BUSYBOX));
    await chmod(join(root, "bin", "busybox"), 0o755);
    const applets = (await sh(BUSYBOX, ["--list"])).split("\n").filter((a) => a && a !== "busybox");
    for (const a of applets) await symlink("busybox", join(root, "bin", a));
    for (const [path, content] of Object.entries(recipe.files ?? {})) {
      await mkdir(dirname(join(root, path)), { recursive: true });
      await writeFile(join(root, path), content, { mode: 0o755 });
    }
    const changes = [`CMD ${JSON.stringify(recipe.cmd)}`, "ENV PATH=/bin"];
    for (const [k, v] of Object.entries(recipe.labels ?? {})) changes.push(`LABEL ${k}=${JSON.stringify(v)}`);
    for (const v of recipe.volumes ?? []) changes.push(`VOLUME ${v}`);
    const tarball = join(dir, "rootfs.tar");
    await sh("tar", ["-C", root, "-cf", tarball, "."]);
    await podman("import", ...changes.flatMap((c) => ["--change", c]), tarball, recipe.ref);
    const archive = join(dir, "image.tar");
    await podman("save", "--format", "oci-archive", "-o", archive, recipe.ref);
    if (!recipe.keep) await podman("rmi", recipe.ref);
    const bytes = await readFile(archive);
    return {
      ref: recipe.ref,
      archive: bytes,
      digest: `sha256:${createHash("sha256").update(bytes).digest("hex")}`,
      size: bytes.length,
    };
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}

/**
 * A container's command for the podman tests: appends "start V" to /data/log when it starts and
 * "stop V" when asked to stop, so a test can tell from the volume in which order versions ran.
 */
export const serve = (version: string) => [
  "/bin/sh",
  "-c",
  `echo "start ${version}" >> /data/log; trap 'echo "stop ${version}" >> /data/log; exit 0' TERM; while :; do sleep 0.2; done`,
];

export type ImageSet<K extends string> = {
  images: Record<"v1" | "v2" | "v2first" | K, BuiltImage>;
  blobs: Record<"v1" | "v2" | "v2first" | K, { id: string; digest: string; size: number }>;
};

/**
 * The podman tests' images, served by `server`: v1 and v2 of one app with a /data volume (v2
 * updated stop-first, v2first start-first), and each file's own `extra` recipes. Tagged under
 * `localhost/<scope>-app`, which cleanPodman(scope) removes.
 */
export async function buildImageSet<K extends string = never>(
  scope: string,
  server: BlobServer,
  extra: Record<K, Omit<ImageRecipe, "ref">> = {} as Record<K, Omit<ImageRecipe, "ref">>,
): Promise<ImageSet<K>> {
  const recipes: Record<string, Omit<ImageRecipe, "ref">> = {
    v1: { cmd: serve("1"), volumes: ["/data"] },
    v2: { cmd: serve("2"), volumes: ["/data"] },
    v2first: { cmd: serve("2"), volumes: ["/data"], labels: { "io.harbormaster.update": "start-first" } },
    ...extra,
  };
  const images: Record<string, BuiltImage> = {};
  const blobs: Record<string, { id: string; digest: string; size: number }> = {};
  for (const [key, recipe] of Object.entries(recipes)) {
    images[key] = await buildImage({ ...recipe, ref: `localhost/${scope}-app:${key.toLowerCase()}` });
    blobs[key] = server.put(images[key].archive);
  }
  return { images, blobs } as ImageSet<K>;
}

/** The desired config's entry for a stored image, as the control plane sends it. */
export function storedSpec(
  name: string,
  version: string,
  blob: { id: string; digest: string; size: number },
  kind: "oci-archive" | "tarball" = "oci-archive",
  instance_id: string = randomUUID(),
): DriverSpec & { source: { blob: string } } {
  return {
    name,
    image: name,
    version,
    instance_id,
    image_id: blob.id,
    kind,
    digest: blob.digest,
    size: blob.size,
    source: { blob: `/v1/agent/images/${blob.id}/blob` },
  };
}

export interface BlobRequest {
  path: string;
  range: string | null;
  authorization: string | null;
}

/**
 * Stands in for the control plane's blob route: bearer token checked, Range answered with 206,
 * ETag the digest. `dropAfter` cuts the connection after that many bytes of the next response(s),
 * as a flaky network would.
 */
export class BlobServer {
  readonly token = `hms.test.${randomBytes(8).toString("hex")}`;
  readonly requests: BlobRequest[] = [];
  private readonly blobs = new Map<string, { bytes: Buffer; digest: string }>();
  private server: Server | null = null;
  /** Bytes to send before dropping the connection, one entry per coming response. */
  dropAfter: number[] = [];
  /** Ignore Range and send everything (a server without Range support). */
  ignoreRange = false;
  url = "";

  async start() {
    this.server = createServer((req, res) => {
      const path = new URL(req.url ?? "/", "http://x").pathname;
      this.requests.push({ path, range: req.headers.range ?? null, authorization: req.headers.authorization ?? null });
      const blob = this.blobs.get(path);
      if (req.headers.authorization !== `Bearer ${this.token}`) {
        res
          .writeHead(401, { "content-type": "application/json" })
          .end(JSON.stringify({ error: { code: "unauthorized", message: "bad token" } }));
        return;
      }
      if (!blob) {
        res
          .writeHead(404, { "content-type": "application/json" })
          .end(JSON.stringify({ error: { code: "image_not_found", message: "no such image" } }));
        return;
      }
      let start = 0;
      const m = /^bytes=(\d+)-$/.exec(req.headers.range ?? "");
      if (m && !this.ignoreRange) {
        start = Number(m[1]);
        if (start >= blob.bytes.length) {
          res.writeHead(416, { "content-range": `bytes */${blob.bytes.length}` }).end();
          return;
        }
      }
      const body = blob.bytes.subarray(start);
      const headers: Record<string, string | number> = {
        etag: `"${blob.digest}"`,
        "content-length": body.length,
        "accept-ranges": "bytes",
      };
      if (start > 0) headers["content-range"] = `bytes ${start}-${blob.bytes.length - 1}/${blob.bytes.length}`;
      res.writeHead(start > 0 ? 206 : 200, headers);
      const drop = this.dropAfter.shift();
      if (drop !== undefined) {
        // The drop waits for the client to take in what it got: under load, an early close left it
        // with nothing on disk, and the resumed range then depended on the machine's load.
        res.write(body.subarray(0, drop), () => setTimeout(() => res.destroy(), 300));
        return;
      }
      res.end(body);
    });
    await new Promise<void>((resolve) => this.server!.listen(0, "127.0.0.1", resolve));
    this.url = `http://127.0.0.1:${(this.server!.address() as AddressInfo).port}`;
    return this;
  }

  /** Serves these bytes at a new blob path; returns what a spec needs. */
  put(bytes: Buffer, digest = `sha256:${createHash("sha256").update(bytes).digest("hex")}`) {
    const id = randomUUID();
    this.blobs.set(`/v1/agent/images/${id}/blob`, { bytes, digest });
    return { id, digest, size: bytes.length };
  }

  async stop() {
    await new Promise<void>((resolve) => (this.server ? this.server.close(() => resolve()) : resolve()));
    this.server?.closeAllConnections();
  }
}

/** Removes whatever a run left in podman: its containers, volumes and images. */
export async function cleanPodman(scope: string, imageRefs: string[] = []) {
  const ids = (await podman("ps", "-a", "-q", "--filter", `label=io.harbormaster.scope=${scope}`))
    .split("\n")
    .filter(Boolean);
  if (ids.length) await podman("rm", "-f", "-t", "0", "-v", ...ids);
  const vols = (await podman("volume", "ls", "-q", "--filter", `label=io.harbormaster.scope=${scope}`))
    .split("\n")
    .filter(Boolean);
  if (vols.length) await podman("volume", "rm", "-f", ...vols);
  // Images this run loaded (by their repository's prefix) and any leftover tags.
  const images = JSON.parse((await podman("images", "--format", "json")) || "[]") as { Id: string; Names?: string[] }[];
  const ours = images.filter(
    (i) => (i.Names ?? []).some((n) => n.includes(`/${scope}-`)) || imageRefs.some((r) => (i.Names ?? []).includes(r)),
  );
  if (ours.length) await sh("podman", ["rmi", "-f", ...ours.map((i) => i.Id)]).catch(() => {});
}

/** Polls `check` until it returns something truthy, or throws after `ms`. */
export async function eventually<T>(
  check: () => Promise<T | null | undefined | false>,
  ms = 20_000,
  what = "condition",
): Promise<T> {
  const deadline = Date.now() + ms;
  for (;;) {
    const v = await check();
    if (v) return v;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 200));
  }
}

/**
 * A host agent on `driver` whose passes a test drives by hand (`pass()`: one reconcileAndReport,
 * as the loop makes it), and the reports it sent. `s` is the loop's state, for the test to change.
 */
export function handDriven(driver: AgentDriver, desired: DesiredConfig) {
  const agent = new HostAgent({ url: "http://127.0.0.1:1", token: "hms.x.y", driver, bootId: "b" });
  const s = { desired, due: true, lastReportAt: -Infinity, lastReport: null } as unknown as LoopState;
  const sent: Report[] = [];
  const send = async (r: Report) => (sent.push(r), { report_tag: null } as unknown as ReportAccepted);
  return { s, sent, pass: () => agent.reconcileAndReport(s, send) };
}
