/**
 * Agent builds in R2 (binding IMAGES, which the image catalog shares): one object per target at
 * `agent-builds/<os>-<arch>`, its version and SHA-256 in its custom metadata. A publish is one R2
 * put, which replaces the object whole or not at all: a download never sees half of a build.
 */
const buildKey = (target: string) => `agent-builds/${target}`;

export interface BuildMeta {
  version: string;
  sha256: string;
  published_at: string;
  published_by: string;
}

export const putBuild = (bucket: R2Bucket, target: string, body: ReadableStream, meta: BuildMeta) =>
  bucket.put(buildKey(target), body, {
    sha256: meta.sha256,
    httpMetadata: { contentType: "application/octet-stream" },
    customMetadata: { ...meta },
  });

export const getBuild = (bucket: R2Bucket, target: string) => bucket.get(buildKey(target));
export const headBuild = (bucket: R2Bucket, target: string) => bucket.head(buildKey(target));

export function metaOf(object: R2Object): BuildMeta {
  const m = object.customMetadata ?? {};
  return {
    version: m.version ?? "",
    sha256: m.sha256 ?? "",
    published_at: m.published_at ?? "",
    published_by: m.published_by ?? "",
  };
}
