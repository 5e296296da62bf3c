import { createHash, randomBytes } from "node:crypto";
import { createServer } from "node:http";
import type { AddressInfo } from "node:net";
import { readdir, readFile, rm, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { BlobFetcher, DigestMismatchError } from "../drivers/download.ts";
import { ApiError } from "../http.ts";
import { BlobServer, tempDir } from "./helpers.ts";

describe("BlobFetcher", () => {
  let server: BlobServer;
  let cache: string;
  const bytes = randomBytes(300_000);

  beforeAll(async () => {
    server = await new BlobServer().start();
  });
  afterAll(async () => {
    await server.stop();
  });
  afterEach(async () => {
    server.requests.length = 0;
    server.dropAfter = [];
    server.ignoreRange = false;
    if (cache) await rm(cache, { recursive: true, force: true });
  });

  const fetcher = async (extra: Partial<ConstructorParameters<typeof BlobFetcher>[0]> = {}) => {
    cache = await tempDir("hm-cache-");
    return new BlobFetcher({
      baseUrl: server.url,
      token: server.token,
      cacheDir: join(cache, "blobs"),
      retryDelayMs: 10,
      ...extra,
    });
  };

  it("downloads a blob with the server's token and hands out a file holding exactly its bytes", async () => {
    const blob = server.put(bytes);
    const f = await fetcher();
    const path = await f.fetch(`/v1/agent/images/${blob.id}/blob`, blob.digest, blob.size);
    expect((await readFile(path)).equals(bytes)).toBe(true);
    expect(server.requests).toEqual([
      { path: `/v1/agent/images/${blob.id}/blob`, range: null, authorization: `Bearer ${server.token}` },
    ]);
  });

  it("resumes with Range after a dropped connection and still verifies the whole", async () => {
    const blob = server.put(bytes);
    server.dropAfter = [100_000, 50_000];
    const f = await fetcher();
    const path = await f.fetch(`/v1/agent/images/${blob.id}/blob`, blob.digest, blob.size);
    expect((await readFile(path)).equals(bytes)).toBe(true);
    const ranges = server.requests.map((r) => r.range);
    expect(ranges[0]).toBeNull();
    expect(ranges.length).toBe(3);
    // Each resumed request asks for the bytes after the ones already on disk.
    expect(ranges.slice(1).every((r) => /^bytes=[1-9]\d*-$/.test(r ?? ""))).toBe(true);
    expect(Number(/\d+/.exec(ranges[2]!)![0])).toBeGreaterThan(Number(/\d+/.exec(ranges[1]!)![0]));
  });

  it("continues the partial file a killed agent left, from where it stopped", async () => {
    const blob = server.put(bytes);
    const f = await fetcher();
    const partial = `${f.pathOf(blob.digest)}.partial`;
    await f.fetch(`/v1/agent/images/${blob.id}/blob`, blob.digest, blob.size).then((p) => rm(p));
    await writeFile(partial, bytes.subarray(0, 123_456));
    server.requests.length = 0;
    const path = await f.fetch(`/v1/agent/images/${blob.id}/blob`, blob.digest, blob.size);
    expect((await readFile(path)).equals(bytes)).toBe(true);
    expect(server.requests.map((r) => r.range)).toEqual(["bytes=123456-"]);
  });

  it("starts over when the server ignores the range", async () => {
    const blob = server.put(bytes);
    server.dropAfter = [70_000];
    server.ignoreRange = true;
    const f = await fetcher();
    const path = await f.fetch(`/v1/agent/images/${blob.id}/blob`, blob.digest, blob.size);
    expect((await readFile(path)).equals(bytes)).toBe(true);
  });

  it("refuses bytes that do not match the digest and deletes them", async () => {
    const corrupted = Buffer.from(bytes);
    corrupted[1000] ^= 0xff;
    const good = server.put(bytes);
    const blob = server.put(corrupted, good.digest);
    const f = await fetcher();
    const err = await f.fetch(`/v1/agent/images/${blob.id}/blob`, blob.digest, blob.size).catch((e) => e);
    expect(err).toBeInstanceOf(DigestMismatchError);
    expect(err.message).toMatch(/does not match its digest.*nothing was installed/);
    expect(await readdir(join(cache, "blobs"))).toEqual([]);
  });

  it("refuses a download larger than the image's size without keeping it", async () => {
    const blob = server.put(bytes);
    const f = await fetcher();
    const err = await f.fetch(`/v1/agent/images/${blob.id}/blob`, blob.digest, blob.size - 10).catch((e) => e);
    expect(err).toBeInstanceOf(DigestMismatchError);
    expect(await readdir(join(cache, "blobs"))).toEqual([]);
  });

  it("refuses a download without a size once it passes its bound, instead of filling the disk", async () => {
    const endless = createServer((req, res) => {
      res.writeHead(200);
      const block = Buffer.alloc(64 * 1024, 1);
      const more = () => {
        while (res.write(block));
        res.once("drain", more);
      };
      more();
    });
    await new Promise<void>((r) => endless.listen(0, "127.0.0.1", r));
    try {
      const f = await fetcher({
        baseUrl: `http://127.0.0.1:${(endless.address() as AddressInfo).port}`,
        maxUnsizedBytes: 1024 * 1024,
      });
      const err = await Promise.race([
        f.fetch("/v1/agent/images/x/blob", `sha256:${"1".repeat(64)}`).catch((e: unknown) => e),
        new Promise((r) => setTimeout(() => r("still downloading after 5 s"), 5_000)),
      ]);
      expect(err).toBeInstanceOf(DigestMismatchError);
      expect(String(err)).toMatch(/passed 1048576 bytes .* no size/);
      expect(await readdir(join(cache, "blobs"))).toEqual([]);
    } finally {
      endless.closeAllConnections();
      await new Promise<void>((r) => endless.close(() => r()));
    }
  });

  it("does not retry a refusal: a 404 is the server's answer, with its error code", async () => {
    const f = await fetcher();
    const err = await f.fetch(`/v1/agent/images/nope/blob`, `sha256:${"0".repeat(64)}`).catch((e) => e);
    expect(err).toBeInstanceOf(ApiError);
    expect(err.code).toBe("image_not_found");
    expect(server.requests.length).toBe(1);
  });

  it("re-checks a cached blob and downloads again when it rotted on disk", async () => {
    const blob = server.put(bytes);
    const f = await fetcher();
    const path = await f.fetch(`/v1/agent/images/${blob.id}/blob`, blob.digest, blob.size);
    expect(await f.fetch(`/v1/agent/images/${blob.id}/blob`, blob.digest, blob.size)).toBe(path);
    expect(server.requests.length).toBe(1);
    await writeFile(path, "rot");
    expect(
      (await readFile(await f.fetch(`/v1/agent/images/${blob.id}/blob`, blob.digest, blob.size))).equals(bytes),
    ).toBe(true);
    expect(server.requests.length).toBe(2);
  });
});

describe("BlobFetcher against a server that stalls", () => {
  it("drops a response that sends nothing for its idle bound and resumes it with Range", async () => {
    const bytes = randomBytes(200_000);
    const digest = `sha256:${createHash("sha256").update(bytes).digest("hex")}`;
    const ranges: (string | null)[] = [];
    const server = createServer((req, res) => {
      ranges.push(req.headers.range ?? null);
      if (!req.headers.range) {
        // Half the bytes, then silence with the connection open, as a stuck proxy does.
        res.writeHead(200, { "Content-Length": bytes.length });
        res.write(bytes.subarray(0, 80_000));
        return;
      }
      const from = Number(/^bytes=(\d+)-$/.exec(req.headers.range)![1]);
      res.writeHead(206, {
        "Content-Range": `bytes ${from}-${bytes.length - 1}/${bytes.length}`,
        "Content-Length": bytes.length - from,
      });
      res.end(bytes.subarray(from));
    });
    await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
    const cache = await tempDir("hm-cache-");
    try {
      const f = new BlobFetcher({
        baseUrl: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
        token: "hms.t",
        cacheDir: join(cache, "blobs"),
        idleTimeoutMs: 300,
        retryDelayMs: 10,
      });
      const t0 = Date.now();
      const path = await f.fetch("/v1/agent/images/x/blob", digest, bytes.length);
      expect(Date.now() - t0).toBeLessThan(5_000);
      expect((await readFile(path)).equals(bytes)).toBe(true);
      expect(ranges[0]).toBeNull();
      expect(ranges[1]).toMatch(/^bytes=[1-9]\d*-$/);
    } finally {
      server.closeAllConnections();
      await new Promise<void>((r) => server.close(() => r()));
      await rm(cache, { recursive: true, force: true });
    }
  });
  /** A blob server whose every answer is scripted by `answer`, given the request's Range. */
  async function scripted(answer: (range: string | null, res: import("node:http").ServerResponse) => void) {
    const ranges: (string | null)[] = [];
    const server = createServer((req, res) => {
      ranges.push(req.headers.range ?? null);
      answer(req.headers.range ?? null, res);
    });
    await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
    const cache = await tempDir("hm-cache-");
    return {
      ranges,
      fetcher: (extra: Partial<ConstructorParameters<typeof BlobFetcher>[0]>) =>
        new BlobFetcher({
          baseUrl: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
          token: "hms.t",
          cacheDir: join(cache, "blobs"),
          retryDelayMs: 10,
          ...extra,
        }),
      close: async () => {
        server.closeAllConnections();
        await new Promise<void>((r) => server.close(() => r()));
        await rm(cache, { recursive: true, force: true });
      },
    };
  }

  it("keeps a response whose headers came late in the period but whose body comes at a good pace", async () => {
    const bytes = randomBytes(40_000);
    const digest = `sha256:${createHash("sha256").update(bytes).digest("hex")}`;
    const timers: NodeJS.Timeout[] = [];
    // Headers at 90% of the period, then 2,000 bytes every 100 ms: five times the floor.
    const s = await scripted((_range, res) => {
      timers.push(
        setTimeout(() => {
          res.writeHead(200, { "Content-Length": bytes.length }).flushHeaders();
          let at = 0;
          const drip = setInterval(() => {
            res.write(bytes.subarray(at, (at += 2_000)));
            if (at < bytes.length) return;
            clearInterval(drip);
            res.end();
          }, 100);
          timers.push(drip);
        }, 900),
      );
    });
    try {
      const path = await s
        .fetcher({ idleTimeoutMs: 1_000, lowSpeedBytes: 4_096 })
        .fetch("/v1/agent/images/x/blob", digest, bytes.length);
      expect((await readFile(path)).equals(bytes)).toBe(true);
      // One request: the wait for the headers did not count against the body's pace.
      expect(s.ranges).toEqual([null]);
    } finally {
      for (const t of timers) clearInterval(t);
      await s.close();
    }
  });

  it("drops a response whose headers never come, after the same bound, and asks again", async () => {
    const bytes = randomBytes(50_000);
    const digest = `sha256:${createHash("sha256").update(bytes).digest("hex")}`;
    let asked = 0;
    const s = await scripted((_range, res) => {
      // The first request is taken and never answered.
      if (asked++ === 0) return;
      res.writeHead(200, { "Content-Length": bytes.length });
      res.end(bytes);
    });
    try {
      const t0 = Date.now();
      const path = await Promise.race([
        s.fetcher({ idleTimeoutMs: 300 }).fetch("/v1/agent/images/x/blob", digest, bytes.length),
        new Promise<never>((_, no) => setTimeout(() => no(new Error("still waiting after 5 s")), 5_000)),
      ]);
      expect(Date.now() - t0).toBeLessThan(5_000);
      expect((await readFile(path)).equals(bytes)).toBe(true);
      expect(s.ranges).toEqual([null, null]);
    } finally {
      await s.close();
    }
  });

  it("drops a response that trickles a byte now and then as it drops a silent one, and resumes it", async () => {
    const bytes = randomBytes(200_000);
    const digest = `sha256:${createHash("sha256").update(bytes).digest("hex")}`;
    const ranges: (string | null)[] = [];
    const drips: NodeJS.Timeout[] = [];
    const server = createServer((req, res) => {
      ranges.push(req.headers.range ?? null);
      if (!req.headers.range) {
        // A byte every 20 ms: never idle for the bound, and never done (5 days for this blob).
        res.writeHead(200, { "Content-Length": bytes.length });
        let at = 0;
        drips.push(setInterval(() => res.write(bytes.subarray(at, ++at)), 20));
        return;
      }
      const from = Number(/^bytes=(\d+)-$/.exec(req.headers.range)![1]);
      res.writeHead(206, {
        "Content-Range": `bytes ${from}-${bytes.length - 1}/${bytes.length}`,
        "Content-Length": bytes.length - from,
      });
      res.end(bytes.subarray(from));
    });
    await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
    const cache = await tempDir("hm-cache-");
    try {
      const f = new BlobFetcher({
        baseUrl: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
        token: "hms.t",
        cacheDir: join(cache, "blobs"),
        idleTimeoutMs: 300,
        lowSpeedBytes: 4096,
        retryDelayMs: 10,
      });
      const t0 = Date.now();
      const path = await Promise.race([
        f.fetch("/v1/agent/images/x/blob", digest, bytes.length),
        new Promise<never>((_, no) => setTimeout(() => no(new Error("still downloading after 5 s")), 5_000)),
      ]);
      expect(Date.now() - t0).toBeLessThan(5_000);
      expect((await readFile(path)).equals(bytes)).toBe(true);
      expect(ranges[0]).toBeNull();
      expect(ranges[1]).toMatch(/^bytes=[1-9]\d*-$/);
    } finally {
      for (const d of drips) clearInterval(d);
      server.closeAllConnections();
      await new Promise<void>((r) => server.close(() => r()));
      await rm(cache, { recursive: true, force: true });
    }
  });
});
