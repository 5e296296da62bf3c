import { auditInsert } from "../db/audit";
import { getDb } from "../db/client";
import { DomainError, notFound } from "../domain/errors";
import type { Env } from "../env";
import { MAX_AGENT_BUILD_BYTES } from "./schemas";
import { getBuild, headBuild, metaOf, putBuild } from "./store";

export const buildFileName = (target: string) => `harbormaster-agent-${target}`;

export function buildView(object: R2Object, target: string, origin: string) {
  const meta = metaOf(object);
  const [os, arch] = target.split("-");
  return { os, arch, ...meta, size: object.size, url: `${origin}/v1/agent/download/${target}` };
}

/**
 * Stores a build, streamed from the request into R2 (never held whole in the Worker), decompressed
 * on the way when it was sent gzip-compressed. R2 checks the SHA-256 the publisher sent against the
 * bytes it received and refuses a mismatch, in which case the previous build stays in place.
 */
export async function publishBuild(
  env: Env,
  actor: string,
  target: string,
  input: {
    version: string;
    sha256: string;
    contentLength?: number;
    gzip: boolean;
    size?: number;
    body: ReadableStream | null;
  },
) {
  const length = input.gzip ? input.size : (input.size ?? input.contentLength);
  if (length === undefined) {
    throw new DomainError(
      "bad_request",
      input.gzip ? "a gzip-compressed build needs X-Agent-Size (its uncompressed length)" : "send Content-Length",
    );
  }
  if (length > MAX_AGENT_BUILD_BYTES) {
    throw new DomainError("payload_too_large", `an agent build is at most ${MAX_AGENT_BUILD_BYTES} bytes`, {
      max_bytes: MAX_AGENT_BUILD_BYTES,
    });
  }
  if (!input.body || length === 0) throw new DomainError("bad_request", "send the build as the request body");
  const meta = {
    version: input.version,
    sha256: input.sha256,
    published_at: new Date().toISOString(),
    published_by: actor,
  };
  // R2 needs the stream's length: the build's own, held to by FixedLengthStream.
  // Piped by hand, each pipe's failure caught here: it reaches R2's read as an error anyway, and
  // left alone it would also surface as an unhandled rejection.
  // A refused put stops them (`stop`), so nothing reads the request on after the answer.
  const stop = new AbortController();
  let bytes = input.body;
  if (input.gzip) {
    const gunzip = new DecompressionStream("gzip");
    input.body.pipeTo(gunzip.writable, { signal: stop.signal }).catch(() => {});
    bytes = gunzip.readable;
  }
  const fixed = new FixedLengthStream(length);
  bytes.pipeTo(fixed.writable, { signal: stop.signal }).catch(() => {});
  const sized = fixed.readable;
  let object: R2Object | null;
  try {
    object = await putBuild(env.IMAGES, target, sized, meta);
  } catch (err) {
    stop.abort();
    const message = String((err as Error)?.message ?? err);
    if (/sha-?256|checksum|digest/i.test(message)) {
      throw new DomainError("bad_request", "the body's SHA-256 is not the X-Checksum-Sha256 sent; nothing was stored", {
        sha256: input.sha256,
      });
    }
    if (/length|bytes|gzip|decompress|incorrect header|unexpected end/i.test(message)) {
      throw new DomainError("bad_request", "the body is not the build's length, or not valid gzip; nothing was stored");
    }
    throw err;
  }
  if (!object) throw new Error("R2 stored nothing");
  await getDb(env.DB).batch([
    auditInsert(getDb(env.DB), {
      actor,
      action: "agent_build.publish",
      target: `agent-build:${target}`,
      details: { version: meta.version, sha256: meta.sha256, size: object.size },
    }),
  ]);
  return object;
}

export async function buildObject(env: Env, target: string) {
  const object = await getBuild(env.IMAGES, target);
  if (!object) throw notFound("agent build", target);
  return object;
}

export async function buildHead(env: Env, target: string) {
  const object = await headBuild(env.IMAGES, target);
  if (!object) throw notFound("agent build", target);
  return object;
}

/** `<hex>  harbormaster-agent-<os>-<arch>`: what `sha256sum -c` reads. */
export const checksumLine = (sha256: string, target: string) => `${sha256}  ${buildFileName(target)}\n`;
