import { and, eq, sql } from "drizzle-orm";
import { auditInsert, auditInsertIf } from "../db/audit";
import { getDb, type Db } from "../db/client";
import { isUniqueViolation } from "../db/errors";
import { imageParts, images } from "../db/schema";
import { DomainError } from "../domain/errors";
import { ABANDONED_UPLOAD_MS, blobPath, imageKey, partBytes, partCount, type CatalogFields } from "../domain/images";
import type { Env } from "../env";

const bucket = (env: Env) => env.IMAGES;
import { decodeCursor, page } from "../http/paging";
import { logLine } from "../lib/log";
import { sameLabels } from "../model/server/labels";
import { UploadRefusal, type ImageInput } from "./schemas";
import {
  abandonedUploads,
  deletionDone,
  forgetAbandoned,
  forgetImage,
  imageById,
  imageByNameVersion,
  imageView,
  inUse,
  listImages,
  owedDeletions,
  partsOf,
  partsOfImages,
  UPLOAD_REFUSED,
  uploadRefusalOf,
  usersOf,
  type ImageRow,
} from "./store";

const notFound = (id: string) => new DomainError("not_found", `no image ${id}`);

/** The refusal of bytes that are not the registered ones: the same answer however often it is asked. */
const digestMismatch = (r: UploadRefusal) =>
  new DomainError(
    "digest_mismatch",
    r.actual === null
      ? `the uploaded bytes are ${r.size ?? 0}, not the ${r.registered_size === undefined ? "registered size" : `${r.registered_size} registered`}; nothing was kept`
      : `the uploaded bytes hash to ${r.actual}, not the registered ${r.expected}; nothing was kept`,
    { expected: r.expected, actual: r.actual },
  );

/**
 * An image a completion names is gone: if its bytes were refused, the completion is a retry whose
 * answer was lost, and gets that refusal again; otherwise (never registered, deleted, swept as
 * abandoned, or a refusal past the audit log's retention) it is not found.
 */
async function goneImage(db: Db, id: string) {
  const refused = UploadRefusal.safeParse((await uploadRefusalOf(db, id))?.details);
  return refused.success ? digestMismatch(refused.data) : notFound(id);
}

/**
 * Whether a registration is the image already registered under its name and version: its content,
 * and its labels and description too (an image never changes, so a registration that differs in
 * them would otherwise be answered as if they had been kept).
 */
const sameImage = (row: ImageRow, input: ImageInput) =>
  row.kind === input.kind &&
  row.digest === input.digest &&
  row.size === input.size &&
  (row.ref ?? undefined) === input.ref &&
  sameLabels(row.labels, input.labels) &&
  (row.description ?? undefined) === input.description;

async function answerExisting(db: Db, row: ImageRow, input: ImageInput) {
  if (!sameImage(row, input)) {
    throw new DomainError(
      "image_conflict",
      `${row.name} ${row.version} is already registered with other content, labels or description (${row.kind}, ${row.digest}, ${row.size} bytes); an image never changes: register another version`,
      {
        id: row.id,
        kind: row.kind,
        digest: row.digest,
        size: row.size,
        labels: row.labels,
        description: row.description,
      },
    );
  }
  return { created: false, image: imageView(row, row.state === "uploading" ? await partsOf(db, row.id) : []) };
}

/**
 * POST /v1/images. An oci-ref is ready at once; a stored kind gets an R2 multipart upload and
 * waits for its parts. The same (name, version) and content again answers the image as it is
 * (with the parts received so far: a client resumes from there).
 */
export async function registerImage(env: Env, actor: string, input: ImageInput) {
  const db = getDb(env.DB);
  const existing = await imageByNameVersion(db, input.name, input.version);
  if (existing) return answerExisting(db, existing, input);

  const id = crypto.randomUUID();
  const now = Date.now();
  const stored = input.kind !== "oci-ref";
  // R2 first: a crash before the row is written leaves an upload no row names, which R2's own
  // rule for incomplete multipart uploads aborts (7 days by default); never a row without an upload.
  const upload = stored ? await bucket(env).createMultipartUpload(imageKey(id)) : null;
  const row: ImageRow = {
    id,
    name: input.name,
    version: input.version,
    kind: input.kind,
    digest: input.digest,
    size: input.size,
    ref: input.ref ?? null,
    labels: input.labels,
    description: input.description ?? null,
    state: stored ? "uploading" : "ready",
    uploadId: upload?.uploadId ?? null,
    partSize: stored ? input.part_size : null,
    createdAt: now,
    createdBy: actor,
  };
  try {
    await db.batch([
      db.insert(images).values(row),
      auditInsert(
        db,
        {
          actor,
          action: "image.register",
          target: `image:${id}`,
          details: { name: row.name, version: row.version, kind: row.kind, digest: row.digest },
        },
        now,
      ),
    ]);
  } catch (err) {
    if (!isUniqueViolation(err)) throw err;
    // Another registration of this name and version won the race: ours is not kept.
    await upload?.abort().catch(() => undefined);
    const winner = await imageByNameVersion(db, input.name, input.version);
    if (!winner) throw err;
    return answerExisting(db, winner, input);
  }
  return { created: true, image: imageView(row, []) };
}

async function uploadingImage(db: Db, id: string) {
  const row = await imageById(db, id);
  if (!row) throw notFound(id);
  if (row.state !== "uploading" || !row.uploadId || !row.partSize) {
    throw new DomainError(
      "invalid_state",
      `image ${id} is ${row.kind === "oci-ref" ? "a reference: it has no bytes to upload" : "already complete"}`,
    );
  }
  return { ...row, uploadId: row.uploadId, partSize: row.partSize };
}

/**
 * PUT /v1/images/{id}/parts/{n}: the body streams through to R2 (never held whole), through a
 * FixedLengthStream of the part's size, so a body that ends early fails the part and is not recorded.
 */
export async function putPart(
  env: Env,
  id: string,
  part: number,
  contentLength: number | null,
  body: ReadableStream | null,
) {
  const db = getDb(env.DB);
  const row = await uploadingImage(db, id);
  const parts = partCount(row.size, row.partSize);
  if (part > parts)
    throw new DomainError("invalid_part", `image ${id} is uploaded in ${parts} parts; there is no part ${part}`, {
      parts,
    });
  const want = partBytes(row.size, row.partSize, part);
  if (contentLength !== want || !body) {
    throw new DomainError(
      "invalid_part",
      `part ${part} of image ${id} is ${want} bytes; send it whole with Content-Length: ${want}`,
      {
        part,
        expected_bytes: want,
        content_length: contentLength,
      },
    );
  }
  const fixed = new FixedLengthStream(want);
  const piping = body.pipeTo(fixed.writable).catch((err: unknown) => err);
  const upload = bucket(env).resumeMultipartUpload(imageKey(id), row.uploadId);
  let uploaded: R2UploadedPart;
  try {
    uploaded = await upload.uploadPart(part, fixed.readable);
  } catch (err) {
    const cause = await piping;
    throw new DomainError(
      "invalid_part",
      `part ${part} was not received whole (${String(cause ?? err)}); send it again`,
      { part, expected_bytes: want },
    );
  }
  const now = Date.now();
  await db
    .insert(imageParts)
    .values({ imageId: id, part, etag: uploaded.etag, size: want, uploadedAt: now })
    .onConflictDoUpdate({
      target: [imageParts.imageId, imageParts.part],
      set: { etag: uploaded.etag, size: want, uploadedAt: now },
    });
  const received = await partsOf(db, id);
  return { part, size: want, upload: { part_size: row.partSize, parts, received: received.map((p) => p.part) } };
}

/** R2's InvalidPart: a part number or etag the upload does not have (10025). */
const partsRefused = (err: unknown) => /\(10025\)|specified parts could not be found/i.test(String(err));

/** The sha256 of an R2 object, read through once as a stream. */
async function digestOf(object: R2ObjectBody) {
  const hasher = new crypto.DigestStream("SHA-256");
  await object.body.pipeTo(hasher);
  const bytes = new Uint8Array(await hasher.digest);
  return `sha256:${[...bytes].map((b) => b.toString(16).padStart(2, "0")).join("")}`;
}

/** Deletes what R2 owes: an upload's parts and the object; then drops the debt. */
async function settleDeletion(env: Env, db: Db, key: string, uploadId: string | null) {
  if (uploadId) {
    await bucket(env)
      .resumeMultipartUpload(key, uploadId)
      .abort()
      .catch(() => undefined);
  }
  await bucket(env).delete(key);
  await deletionDone(db, key);
}

/**
 * POST /v1/images/{id}/complete: every part present, R2 assembles them, and the assembled object
 * is read back through a streaming sha256 (WebCrypto cannot carry a hash's state from one request
 * to the next). A different digest forgets the image and its bytes. Retried after a crash at any
 * point, it finds the upload or the object where the previous call left them.
 */
export async function completeUpload(env: Env, actor: string, id: string) {
  const db = getDb(env.DB);
  const row = await imageById(db, id);
  if (!row) throw await goneImage(db, id);
  if (row.state === "ready") {
    if (row.kind === "oci-ref") throw new DomainError("invalid_state", `image ${id} is a reference: it has no upload`);
    return imageView(row);
  }
  const up = await uploadingImage(db, id);
  const parts = await partsOf(db, id);
  const n = partCount(up.size, up.partSize);
  const have = new Map(parts.map((p) => [p.part, p]));
  const missing = Array.from({ length: n }, (_, i) => i + 1).filter(
    (p) => have.get(p)?.size !== partBytes(up.size, up.partSize, p),
  );
  if (missing.length) {
    throw new DomainError("upload_incomplete", `image ${id} still lacks ${missing.length} of its ${n} parts`, {
      missing: missing.slice(0, 100),
      parts: n,
    });
  }
  const key = imageKey(id);
  try {
    await bucket(env)
      .resumeMultipartUpload(key, up.uploadId)
      .complete(parts.map((p) => ({ partNumber: p.part, etag: p.etag })));
  } catch (err) {
    // Completed by an earlier call that did not live to record it: the object is there.
    const head = await bucket(env).head(key);
    if (!head && !partsRefused(err)) throw err;
    if (!head) {
      // One part sent twice at once: R2 keeps the upload it took last, and D1 may hold the etag of
      // the other. R2's binding lists no parts, so which one is unknown: the records go, and the
      // client's resume (the image's `received`) sends every part again.
      await db.delete(imageParts).where(eq(imageParts.imageId, id));
      throw new DomainError(
        "upload_incomplete",
        `storage refused the parts of image ${id} as recorded (a part was sent twice at once); send its ${n} parts again`,
        { missing: Array.from({ length: Math.min(n, 100) }, (_, i) => i + 1), parts: n },
      );
    }
  }
  const object = await bucket(env).get(key);
  const actual = object && object.size === up.size ? await digestOf(object) : null;
  const now = Date.now();
  if (actual !== up.digest) {
    const refusal: UploadRefusal = {
      expected: up.digest,
      actual,
      size: object?.size ?? null,
      registered_size: up.size,
    };
    // The refusal is recorded only by the call that forgets the image: a concurrent completion
    // that read the same bytes finds it gone and answers the same refusal without a second row.
    const still = sql`EXISTS (SELECT 1 FROM ${images} WHERE ${and(eq(images.id, id), eq(images.state, "uploading"))})`;
    await db.batch([
      auditInsertIf(db, { actor, action: UPLOAD_REFUSED, target: `image:${id}`, details: refusal }, still, now),
      ...forgetImage(db, up, now),
    ]);
    await settleDeletion(env, db, key, null);
    throw digestMismatch(refusal);
  }
  // Only while it is still an upload: the row may have been completed by a concurrent call, or
  // forgotten by the abandoned-upload sweep (its bytes then owed a delete), since it was read.
  const uploading = and(eq(images.id, id), eq(images.state, "uploading"));
  const [, completed] = await db.batch([
    auditInsertIf(
      db,
      { actor, action: "image.upload_complete", target: `image:${id}`, details: { digest: up.digest, size: up.size } },
      sql`EXISTS (SELECT 1 FROM ${images} WHERE ${uploading})`,
      now,
    ),
    db.update(images).set({ state: "ready", uploadId: null }).where(uploading).returning({ id: images.id }),
    db.delete(imageParts).where(eq(imageParts.imageId, id)),
  ]);
  if (completed.length === 0) {
    const current = await imageById(db, id);
    if (!current) {
      throw new DomainError(
        "not_found",
        `image ${id} was forgotten as an abandoned upload (older than a day) while it completed; register it again`,
      );
    }
    return imageView(current);
  }
  return imageView({ ...up, state: "ready", uploadId: null });
}

/** The image; who uses it is shown only within the fleets the token may see (null: every fleet). */
export async function getImage(env: Env, id: string, visible: readonly string[] | null) {
  const db = getDb(env.DB);
  const row = await imageById(db, id);
  if (!row) throw notFound(id);
  const [parts, users] = await Promise.all([
    row.state === "uploading" ? partsOf(db, id) : [],
    usersOf(db, row, visible),
  ]);
  return { ...imageView(row, parts), used_by: users };
}

export async function listCatalog(env: Env, q: { name?: string; version?: string; limit: number; cursor?: string }) {
  const db = getDb(env.DB);
  const rows = await listImages(db, {
    name: q.name,
    version: q.version,
    after: decodeCursor(q.cursor, 3),
    limit: q.limit,
  });
  const paged = page(rows, q.limit, (r) => [r.name, r.version, r.id]);
  const uploading = paged.items.filter((r) => r.state === "uploading").map((r) => r.id);
  const parts = await partsOfImages(db, uploading);
  return {
    items: paged.items.map((r) =>
      imageView(
        r,
        parts.filter((p) => p.imageId === r.id),
      ),
    ),
    next_cursor: paged.next_cursor,
  };
}

/** DELETE /v1/images/{id}: refused while a channel, a live rollout or a server wants it. */
export async function deleteImage(env: Env, actor: string, id: string) {
  const db = getDb(env.DB);
  const row = await imageById(db, id);
  if (!row) throw notFound(id);
  const users = await usersOf(db, row);
  if (inUse(users)) {
    throw new DomainError(
      "image_in_use",
      `image ${row.name} ${row.version} is still wanted; move these off it first`,
      users,
    );
  }
  const now = Date.now();
  await db.batch([
    ...forgetImage(db, row, now),
    auditInsert(
      db,
      { actor, action: "image.delete", target: `image:${id}`, details: { name: row.name, version: row.version } },
      now,
    ),
  ]);
  if (row.kind !== "oci-ref") await settleDeletion(env, db, imageKey(id), row.uploadId);
  return imageView({ ...row, state: row.state });
}

/**
 * Cron: uploads not completed within ABANDONED_UPLOAD_MS are aborted and their rows forgotten, and
 * R2 deletes still owed (a crash after a row was forgotten) are done.
 */
export async function sweepImages(env: Env, now: number, limit = 100) {
  const db = getDb(env.DB);
  const before = now - ABANDONED_UPLOAD_MS;
  const stale = await abandonedUploads(db, before, limit);
  let abandoned = 0;
  for (const row of stale) {
    const entry = {
      actor: "system",
      action: "image.upload_abandoned",
      target: `image:${row.id}`,
      details: { name: row.name, version: row.version },
    };
    const [, , , forgotten] = await db.batch(forgetAbandoned(db, row, before, now, entry));
    abandoned += forgotten.length;
  }
  let settled = 0;
  for (const owed of await owedDeletions(db, limit)) {
    try {
      await settleDeletion(env, db, owed.key, owed.uploadId);
      settled++;
    } catch (err) {
      logLine("warn", "image delete failed; retried next tick", { key: owed.key, error: String(err) });
    }
  }
  return { abandoned, deleted: settled };
}

/** The fields a desired config carries for a catalog image (src/domain/images.ts). */
export const catalogFieldsOf = (row: ImageRow): CatalogFields => ({
  image_id: row.id,
  kind: row.kind,
  digest: row.digest,
  size: row.size,
  source: row.kind === "oci-ref" ? { ref: row.ref ?? "" } : { blob: blobPath(row.id) },
});

/** How a write names an image: by id, or by the catalog's name and version. */
export type ImageName = { image_id: string } | { image: string; version: string };

/**
 * Resolves what a write names to a ready catalog image, or null when the fleet takes free-form
 * images and the write names none by id. `image_not_found` otherwise.
 */
export async function resolveImage(db: Db, policy: "catalog" | "any", named: ImageName) {
  if ("image_id" in named) {
    const row = await imageById(db, named.image_id);
    if (!row || row.state !== "ready")
      throw new DomainError("image_not_found", `no ready image ${named.image_id} in the catalog`, {
        image_id: named.image_id,
      });
    return row;
  }
  if (policy === "any") return null;
  const row = await imageByNameVersion(db, named.image, named.version);
  if (!row || row.state !== "ready") {
    throw new DomainError(
      "image_not_found",
      `the catalog has no ready image ${named.image} ${named.version}, and this fleet takes only catalog images (image_policy "catalog")`,
      { image: named.image, version: named.version },
    );
  }
  return row;
}
