/**
 * The agent's files on a disk that fills up: a small tmpfs mounted for the test (root only; the
 * agent runs as root, and so does its suite). A write(2) into a nearly full file system does not
 * fail: it writes what fits and says how much, and only the next one fails (ENOSPC). A state
 * file written by one short write and then renamed over the good one would be half a JSON file,
 * and a download's last chunk written short would be a file whose hash the agent vouched for
 * without holding those bytes.
 */
import { createHash, randomBytes } from "node:crypto";
import {
  existsSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  statfsSync,
  writeFileSync,
} from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { StateDir } from "../cli/state.ts";
import { BlobFetcher } from "../drivers/download.ts";
import { BlobServer, sh } from "./helpers.ts";

const root = mkdtempSync(join(tmpdir(), "hm-full-disk-"));
const mnt = join(root, "mnt");
let mounted = false;

beforeAll(async () => {
  mkdirSync(mnt);
  await sh("mount", ["-t", "tmpfs", "-o", "size=64k,mode=0700", "tmpfs", mnt]);
  mounted = true;
});
afterAll(async () => {
  if (mounted) await sh("umount", [mnt]);
  rmSync(root, { recursive: true, force: true });
});
afterEach(() => {
  for (const name of readdirSync(mnt)) rmSync(join(mnt, name), { recursive: true, force: true });
});

/** Fills the file system until `free` bytes are left (tmpfs counts whole pages). */
function fillUntil(free: number) {
  const { bavail, bsize } = statfsSync(mnt);
  const fill = bavail * bsize - free;
  if (fill > 0) writeFileSync(join(mnt, "filler"), Buffer.alloc(fill));
  const left = statfsSync(mnt);
  expect(left.bavail * left.bsize).toBe(free);
}

describe("a state file written on a disk with less room than it needs", () => {
  it("fails the write and keeps the file it would have replaced whole; no temporary is left behind", () => {
    const state = new StateDir(join(mnt, "state"));
    const before = { pid: 1, note: "the last good status" };
    state.write("status.json", before);
    fillUntil(4096);
    // Larger than the page left: one write(2) would take 4096 bytes of it and say so, not fail.
    const bigger = {
      pid: 2,
      agents: Array.from({ length: 200 }, (_, i) => ({ name: `agent-${i}`, state: "running" })),
    };
    expect(() => state.write("status.json", bigger)).toThrow(/ENOSPC/);
    expect(state.read("status.json")).toEqual(before);
    expect(readdirSync(state.dir)).toEqual(["status.json"]);
  });
});

describe("a download onto a disk with less room than the image", () => {
  let server: BlobServer;
  beforeAll(async () => {
    server = await new BlobServer().start();
  });
  afterAll(() => server.stop());

  it("fails, and hands out no file: never one shorter than the bytes it verified", async () => {
    // One chunk on the loopback, larger than what is left: its write(2) is short, not refused.
    const bytes = randomBytes(12_000);
    const blob = server.put(bytes);
    const blobs = new BlobFetcher({
      baseUrl: server.url,
      token: server.token,
      cacheDir: join(mnt, "cache"),
      attempts: 2,
      retryDelayMs: 1,
    });
    mkdirSync(join(mnt, "cache"));
    fillUntil(8192);
    const path0 = `/v1/agent/images/${blob.id}/blob`;
    const got = await blobs.fetch(path0, blob.digest, blob.size).catch((e: unknown) => e);
    expect(got).toBeInstanceOf(Error);
    expect(String(got)).toMatch(/ENOSPC/);
    expect(existsSync(blobs.pathOf(blob.digest))).toBe(false);

    // With room again, the download resumes from what it really has on disk and verifies.
    rmSync(join(mnt, "filler"));
    const path = await blobs.fetch(path0, blob.digest, blob.size);
    expect(readFileSync(path).equals(bytes)).toBe(true);
    expect(createHash("sha256").update(readFileSync(path)).digest("hex")).toBe(blob.digest.slice(7));
  });

  it("resumes after the bytes it verified, not after what a failed write left past them", async () => {
    const bytes = randomBytes(12_000);
    const digest = `sha256:${createHash("sha256").update(bytes).digest("hex")}`;
    const ranges: (string | null)[] = [];
    // The first response's second chunk meets the full disk half way (ENOSPC after a short write);
    // by the second request there is room again, and it is answered from the asked range.
    const fetch = async (_url: string | URL | Request, init?: RequestInit) => {
      const range = new Headers(init?.headers).get("Range");
      ranges.push(range);
      if (ranges.length === 1) {
        const chunks = [bytes.subarray(0, 4096), bytes.subarray(4096)];
        return new Response(
          new ReadableStream({
            pull(c) {
              const next = chunks.shift();
              if (next) c.enqueue(new Uint8Array(next));
              else c.close();
            },
          }),
        );
      }
      rmSync(join(mnt, "filler"), { force: true });
      const from = Number(/^bytes=(\d+)-$/.exec(range ?? "")?.[1] ?? 0);
      return new Response(new Uint8Array(bytes.subarray(from)), {
        status: from > 0 ? 206 : 200,
        headers: { "Content-Range": `bytes ${from}-${bytes.length - 1}/${bytes.length}` },
      });
    };
    const blobs = new BlobFetcher({
      baseUrl: "http://127.0.0.1:1",
      token: "hms.t",
      cacheDir: join(mnt, "cache"),
      attempts: 2,
      retryDelayMs: 1,
      fetch,
    });
    mkdirSync(join(mnt, "cache"));
    fillUntil(8192);
    const path = await blobs.fetch("/v1/agent/images/x/blob", digest, bytes.length);
    expect(ranges).toEqual([null, "bytes=4096-"]);
    expect(readFileSync(path).equals(bytes)).toBe(true);
  });
});
