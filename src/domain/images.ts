/**
 * The image catalog's fixed words and limits, and what a desired config carries for a catalog
 * image (the AgentSpec's optional fields). Pure, with no imports, so the host agent (agent/) can
 * load it in Node as it is.
 */

export const IMAGE_KINDS = ["oci-archive", "tarball", "oci-ref"] as const;
type ImageKind = (typeof IMAGE_KINDS)[number];
/** The kinds whose bytes are uploaded to the catalog (a reference has none). */
export const UPLOADED_IMAGE_KINDS = ["oci-archive", "tarball"] as const satisfies readonly ImageKind[];

export const IMAGE_POLICIES = ["catalog", "any"] as const;

/** `sha256:` and 64 lowercase hex digits. */
export const DIGEST = /^sha256:[0-9a-f]{64}$/;
/** An OCI reference pinned by digest: `registry[:port]/path@sha256:<hex>`. */
export const PINNED_REF = /^[a-z0-9.-]+(:[0-9]{1,5})?(\/[a-z0-9._-]+)+@sha256:[0-9a-f]{64}$/;

const MiB = 1024 * 1024;
/** The largest image stored in R2. */
export const MAX_IMAGE_BYTES = 2 * 1024 * MiB;
/**
 * Parts of an upload: each one request, within the Workers request-body limit (100 MB on the free
 * and pro plans); R2 wants every part but the last of one size and at least 5 MiB.
 */
export const DEFAULT_PART_BYTES = 50 * MiB;
export const MIN_PART_BYTES = 5 * MiB;
export const MAX_PART_BYTES = 50 * MiB;
/** R2 keeps at most 10,000 parts per upload. */
export const MAX_PARTS = 10_000;
/** Labels of one image, and the length of each key and value; a description. */
export const MAX_IMAGE_LABELS = 64;
export const MAX_LABEL_KEY_LENGTH = 63;
export const MAX_LABEL_VALUE_LENGTH = 256;
export const MAX_DESCRIPTION_LENGTH = 1000;
/** An upload not completed within this long is abandoned: the cron aborts it and forgets the row. */
export const ABANDONED_UPLOAD_MS = 24 * 60 * 60_000;

/** The R2 key of a stored image's bytes. */
export const imageKey = (id: string) => `images/${id}`;
/** Where a host fetches a stored image, with its own server token. */
export const blobPath = (id: string) => `/v1/agent/images/${id}/blob`;

type ImageSource = { blob: string } | { ref: string };

/** What a desired config's agent entry carries when its image is a catalog image. */
export interface CatalogFields {
  image_id: string;
  kind: ImageKind;
  digest: string;
  size: number;
  source: ImageSource;
}

/** The number of parts an image of `size` bytes is uploaded in, `partSize` bytes each (the last smaller). */
export const partCount = (size: number, partSize: number) => Math.max(1, Math.ceil(size / partSize));
/** The size part `n` (1-based) must have. */
export const partBytes = (size: number, partSize: number, n: number) =>
  n < partCount(size, partSize) ? partSize : size - partSize * (partCount(size, partSize) - 1);

/** The catalog fields of an agent entry that has them, else null. */
export function catalogOf(a: Partial<CatalogFields>): CatalogFields | null {
  if (!a.image_id || !a.kind || !a.digest || a.size === undefined || !a.source) return null;
  return { image_id: a.image_id, kind: a.kind, digest: a.digest, size: a.size, source: a.source };
}

/** The catalog fields to spread into an agent entry (none for a free-form image). */
export const catalogSpread = (c: CatalogFields | null | undefined): Partial<CatalogFields> => (c ? { ...c } : {});
