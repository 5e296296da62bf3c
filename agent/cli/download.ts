/**
 * A blob from Harbormaster (`GET /v1/agent/images/{id}/blob`, with the server's own token) into a
 * file, hashed as it streams: the file is kept only when its sha256 is the digest the desired
 * config names; otherwise it is deleted and the error says both digests.
 */
import { createHash } from "node:crypto";
import { createWriteStream, rmSync } from "node:fs";
import { Readable, Transform } from "node:stream";
import { pipeline } from "node:stream/promises";
import { apiErrorOf, type FetchLike } from "../http.ts";

export async function downloadVerified(opts: {
  url: string;
  token: string;
  digest: string;
  dest: string;
  fetch?: FetchLike;
  signal?: AbortSignal;
}): Promise<{ bytes: number }> {
  const expected = /^sha256:([0-9a-f]{64})$/.exec(opts.digest)?.[1];
  if (!expected) throw new Error(`not a sha256 digest: ${opts.digest}`);
  const fetchImpl = opts.fetch ?? ((i, init) => fetch(i, init));
  const res = await fetchImpl(opts.url, { headers: { Authorization: `Bearer ${opts.token}` }, signal: opts.signal });
  if (!res.ok || !res.body) throw await apiErrorOf(res);
  const hash = createHash("sha256");
  let bytes = 0;
  const tap = new Transform({
    transform(chunk: Buffer, _enc, done) {
      hash.update(chunk);
      bytes += chunk.length;
      done(null, chunk);
    },
  });
  try {
    await pipeline(Readable.fromWeb(res.body as import("node:stream/web").ReadableStream), tap, createWriteStream(opts.dest, { mode: 0o600 }));
  } catch (err) {
    rmSync(opts.dest, { force: true });
    throw new Error(`download of ${opts.url} failed: ${(err as Error).message}`);
  }
  const got = hash.digest("hex");
  if (got !== expected) {
    rmSync(opts.dest, { force: true });
    throw new Error(`digest mismatch: the desired config names sha256:${expected}, the download (${bytes} bytes) is sha256:${got}; nothing was installed`);
  }
  return { bytes };
}
