import { createHash, type Hash } from "node:crypto";
import { createReadStream } from "node:fs";
import { type FileHandle, mkdir, open, readdir, rename, rm, stat } from "node:fs/promises";
import { join } from "node:path";
import { ApiError, apiErrorOf, NO_REDIRECTS, sleep, type FetchLike } from "../http.ts";

export interface BlobFetcherOptions {
  /** The control plane the blob paths are on (the agent's server URL). */
  baseUrl: string | URL;
  /** The server's own token (hms.…), read at each request so a renewed one is used. */
  token: string | (() => string);
  /** Where downloads are kept while they happen and until installed (under the agent's state dir). */
  cacheDir: string;
  fetch?: FetchLike;
  /** Requests per download, resumed with Range after a dropped connection (default 6). */
  attempts?: number;
  /**
   * A response that sends nothing for this long is dropped and resumed (default 30 s): its
   * headers, and then its body, each get this long.
   */
  idleTimeoutMs?: number;
  /**
   * Nor may it send fewer bytes than this in any such period (default 16 KiB, half a KiB a
   * second): one that trickles a byte now and then never goes idle and never ends, and would hold
   * the pass (every other agent's install, update and restart behind it) for as long as it likes.
   */
  lowSpeedBytes?: number;
  /** The most a download whose size the desired config does not give may bring (default 8 GiB). */
  maxUnsizedBytes?: number;
  /** Pause before a resumed request, ms, doubled each time (default 500). */
  retryDelayMs?: number;
}

const MAX_UNSIZED_BYTES = 8 * 1024 ** 3;

/** The bytes downloaded are not the ones the desired config names: nothing may use them. */
export class DigestMismatchError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "DigestMismatchError";
  }
}

const hexOf = (digest: string) => {
  const m = /^sha256:([0-9a-f]{64})$/.exec(digest);
  if (!m) throw new Error(`unsupported digest ${JSON.stringify(digest)} (expected sha256:<64 hex>)`);
  return m[1];
};

/** Feeds a file's bytes into a hash; returns their count (0 when the file does not exist). */
async function hashFile(path: string, hash: Hash): Promise<number> {
  let n = 0;
  try {
    for await (const chunk of createReadStream(path)) {
      hash.update(chunk as Buffer);
      n += (chunk as Buffer).length;
    }
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === "ENOENT") return 0;
    throw err;
  }
  return n;
}

/** Errors worth another request: the connection, the server being busy. Refusals are final. */
const retryable = (err: unknown) =>
  !(err instanceof ApiError) || err.status >= 500 || err.status === 429 || err.status === 408;

/**
 * Downloads stored images' blobs from the control plane into a cache, hashing as the bytes
 * arrive, and hands out a file only once its sha256 is the one the desired config names. A
 * dropped connection resumes with Range where it stopped (also after the agent restarts: the
 * partial file is re-hashed and continued). A mismatch deletes the file and throws
 * DigestMismatchError.
 */
export class BlobFetcher {
  private readonly opts: BlobFetcherOptions;
  private readonly fetchFn: FetchLike;

  constructor(opts: BlobFetcherOptions) {
    this.opts = opts;
    this.fetchFn = opts.fetch ?? ((input, init) => fetch(input, init));
  }

  /** Where a verified blob with this digest lives in the cache. */
  pathOf(digest: string) {
    return join(this.opts.cacheDir, `sha256-${hexOf(digest)}`);
  }

  /** Forgets a cached blob (after it was installed, or when it turned out unusable). */
  async discard(digest: string) {
    await rm(this.pathOf(digest), { force: true });
    await rm(`${this.pathOf(digest)}.partial`, { force: true });
  }

  /**
   * Deletes every cached or partial blob but those of `keep` (the digests the desired config
   * names): what a killed agent downloaded for a config that has since moved on would otherwise
   * stay on the disk for good. A partial blob still wanted is kept, to be resumed.
   */
  async prune(keep: Iterable<string | undefined>) {
    const wanted = new Set<string>();
    for (const d of keep) if (d && /^sha256:[0-9a-f]{64}$/.test(d)) wanted.add(`sha256-${d.slice(7)}`);
    const names = await readdir(this.opts.cacheDir).catch(() => [] as string[]);
    for (const name of names) {
      if (!wanted.has(name.replace(/\.partial$/, ""))) await rm(join(this.opts.cacheDir, name), { force: true });
    }
  }

  /**
   * The path of a local file holding exactly the bytes with this digest, downloaded from
   * `blobPath` (a path on the control plane) unless the cache already holds them.
   */
  async fetch(blobPath: string, digest: string, size?: number, signal?: AbortSignal): Promise<string> {
    const hex = hexOf(digest);
    this.urlOf(blobPath);
    await mkdir(this.opts.cacheDir, { recursive: true, mode: 0o700 });
    const final = this.pathOf(digest);
    const partial = `${final}.partial`;

    // A cached blob is checked again: a disk can rot, and a verified name must never lie.
    if (await exists(final)) {
      const cached = createHash("sha256");
      await hashFile(final, cached);
      if (cached.digest("hex") === hex) return final;
      await rm(final, { force: true });
    }

    // What a previous run left (the agent was killed mid-download) is hashed and continued.
    const state: Progress = { hash: createHash("sha256"), have: 0 };
    state.have = await hashFile(partial, state.hash);
    if (size !== undefined && state.have > size) await restart(partial, state);

    const attempts = this.opts.attempts ?? 6;
    let lastErr: unknown = null;
    for (let attempt = 0; attempt < attempts; attempt++) {
      if (attempt > 0) await sleep((this.opts.retryDelayMs ?? 500) * 2 ** (attempt - 1), signal);
      try {
        await this.request(blobPath, partial, state, size, signal);
        lastErr = null;
        if (size === undefined || state.have === size) break;
        lastErr = new Error(`the response ended at byte ${state.have} of ${size}`);
      } catch (err) {
        if (signal?.aborted) throw err;
        if (err instanceof DigestMismatchError) {
          await rm(partial, { force: true });
          throw err;
        }
        lastErr = err;
        if (err instanceof RestartError) await restart(partial, state);
        else if (!retryable(err)) break;
        // Otherwise what arrived before the drop is on disk and hashed: the next request asks for the rest.
      }
    }
    if (lastErr !== null) {
      if (lastErr instanceof ApiError) throw lastErr;
      const m = lastErr instanceof Error ? lastErr.message : String(lastErr);
      throw new Error(`download of ${blobPath} failed after ${state.have} bytes: ${m}`);
    }
    const got = state.hash.digest("hex");
    if (got !== hex || (size !== undefined && state.have !== size)) {
      await rm(partial, { force: true });
      throw new DigestMismatchError(
        `downloaded image does not match its digest: got sha256:${got} (${state.have} bytes), expected sha256:${hex}` +
          `${size !== undefined ? ` (${size} bytes)` : ""}; the download was deleted and nothing was installed`,
      );
    }
    await rename(partial, final);
    return final;
  }

  /**
   * A blob path's URL on the control plane; throws for one that resolves elsewhere (`//host/…`,
   * a full URL): the request carries the server's token, which only the server may see.
   */
  private urlOf(blobPath: string): URL {
    const base = new URL(this.opts.baseUrl);
    const url = new URL(blobPath, base);
    if (url.origin !== base.origin)
      throw new Error(
        `the image's blob ${JSON.stringify(blobPath.slice(0, 200))} is not on the control plane (${base.origin}); nothing was downloaded`,
      );
    return url;
  }

  /** One request, appending to `partial` from byte `state.have`, hashing what it writes. */
  private async request(
    blobPath: string,
    partial: string,
    state: Progress,
    size: number | undefined,
    signal?: AbortSignal,
  ) {
    const url = this.urlOf(blobPath);
    const token = typeof this.opts.token === "function" ? this.opts.token() : this.opts.token;
    const headers: Record<string, string> = { Authorization: `Bearer ${token}` };
    if (state.have > 0) headers.Range = `bytes=${state.have}-`;
    const controller = new AbortController();
    const onAbort = () => controller.abort(signal?.reason);
    if (signal?.aborted) controller.abort(signal.reason);
    signal?.addEventListener("abort", onAbort, { once: true });
    const maxBytes = this.opts.maxUnsizedBytes ?? MAX_UNSIZED_BYTES;
    const idleMs = this.opts.idleTimeoutMs ?? 30_000;
    const lowSpeed = this.opts.lowSpeedBytes ?? 16 * 1024;
    // The wait for the headers has its own bound, the same span: the speed's periods start only
    // once they arrive, or headers late in the first period would leave the body a moment to
    // bring a whole period's floor.
    const headersDue = setTimeout(() => controller.abort(new Error(`no response headers in ${idleMs} ms`)), idleMs);
    let watch: ReturnType<typeof setInterval> | undefined;
    try {
      const res = await this.fetchFn(url, { ...NO_REDIRECTS, headers, signal: controller.signal });
      clearTimeout(headersDue);
      // Checked once a period: fewer bytes than the floor since the last look is a stall.
      let inPeriod = 0;
      watch = setInterval(() => {
        if (inPeriod < lowSpeed)
          controller.abort(
            new Error(
              inPeriod === 0
                ? `no data for ${idleMs} ms`
                : `${inPeriod} bytes in ${idleMs} ms, under the floor of ${lowSpeed}`,
            ),
          );
        inPeriod = 0;
      }, idleMs);
      if (res.status === 416) {
        await res.body?.cancel();
        throw new RestartError("the server refused the resumed range");
      }
      if (!res.ok) throw await apiErrorOf(res);
      if (state.have > 0) {
        const start =
          res.status === 206 ? Number(/^bytes (\d+)-/.exec(res.headers.get("Content-Range") ?? "")?.[1]) : 0;
        if (start !== state.have) {
          await res.body?.cancel();
          throw new RestartError(
            `the server did not resume at byte ${state.have} (${res.status} ${res.headers.get("Content-Range") ?? ""})`,
          );
        }
      }
      if (!res.body) throw new Error("the response has no body");
      const file = await open(partial, state.have > 0 ? "a" : "w", 0o600);
      try {
        // What an earlier request wrote past the bytes it hashed (a write that failed half way,
        // the disk full) is cut off: the file holds exactly the bytes the hash has seen.
        if (state.have > 0) await file.truncate(state.have);
        for await (const chunk of res.body as unknown as AsyncIterable<Uint8Array>) {
          inPeriod += chunk.length;
          if (size !== undefined && state.have + chunk.length > size) {
            throw new DigestMismatchError(
              `the download is larger than the image's ${size} bytes; it was deleted and nothing was installed`,
            );
          }
          if (size === undefined && state.have + chunk.length > maxBytes) {
            // No size to hold it to (the server sends one; something in its place may not): a
            // body without end would otherwise fill the disk the host's other services share.
            throw new DigestMismatchError(
              `the download passed ${maxBytes} bytes and the desired config gives the image no size; it was deleted and nothing was installed`,
            );
          }
          await writeAll(file, chunk);
          state.hash.update(chunk);
          state.have += chunk.length;
        }
        await file.sync();
      } finally {
        await file.close();
      }
    } finally {
      clearTimeout(headersDue);
      clearInterval(watch);
      signal?.removeEventListener("abort", onAbort);
    }
  }
}

/**
 * Writes all of `chunk`: one write(2) on a nearly full disk writes what fits and says so without
 * failing, and FileHandle.write() makes one call: the download's last chunk would be hashed whole
 * and kept short, and the file handed out as verified.
 */
async function writeAll(file: FileHandle, chunk: Uint8Array) {
  for (let at = 0; at < chunk.length;) at += (await file.write(chunk, at, chunk.length - at)).bytesWritten;
}

interface Progress {
  /** The sha256 of the partial file's bytes so far. */
  hash: Hash;
  have: number;
}

async function restart(partial: string, state: Progress) {
  await rm(partial, { force: true });
  state.hash = createHash("sha256");
  state.have = 0;
}

/** The partial download cannot be continued: it is deleted and fetched from the start. */
class RestartError extends Error {}

async function exists(path: string) {
  return (await stat(path).catch(() => null)) !== null;
}
