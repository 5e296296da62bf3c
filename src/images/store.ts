import { inVisibleFleets } from "../db/access";
import { and, asc, desc, eq, inArray, lt, sql } from "drizzle-orm";
import { auditInsertIf, type AuditEntry } from "../db/audit";
import type { Db } from "../db/client";
import { insertWhere } from "../db/insert-where";
import {
  agentChannels,
  agentInstances,
  auditLog,
  imageDeletions,
  imageParts,
  images,
  rollouts,
  servers,
} from "../db/schema";
import { imageKey, partCount } from "../domain/images";
import { iso } from "../lib/time";
import type { Image } from "./schemas";

export type ImageRow = typeof images.$inferSelect;
export type PartRow = typeof imageParts.$inferSelect;

export const imageView = (r: ImageRow, parts?: PartRow[]): Image => ({
  id: r.id,
  name: r.name,
  version: r.version,
  kind: r.kind,
  digest: r.digest,
  size: r.size,
  ref: r.ref,
  labels: r.labels,
  description: r.description,
  state: r.state,
  created_at: iso(r.createdAt),
  created_by: r.createdBy,
  ...(r.state === "uploading" && r.partSize
    ? {
        upload: {
          part_size: r.partSize,
          parts: partCount(r.size, r.partSize),
          received: (parts ?? []).map((p) => p.part).sort((a, b) => a - b),
        },
      }
    : {}),
});

export const imageById = (db: Db, id: string) => db.query.images.findFirst({ where: eq(images.id, id) });

export const imageByNameVersion = (db: Db, name: string, version: string) =>
  db.query.images.findFirst({ where: and(eq(images.name, name), eq(images.version, version)) });

export const partsOf = (db: Db, id: string) =>
  db.select().from(imageParts).where(eq(imageParts.imageId, id)).orderBy(asc(imageParts.part));

/** By name, then version, then id: one name's versions together. */
export function listImages(db: Db, f: { name?: string; version?: string; after: string[] | null; limit: number }) {
  const a = f.after;
  return db
    .select()
    .from(images)
    .where(
      and(
        f.name ? eq(images.name, f.name) : undefined,
        f.version ? eq(images.version, f.version) : undefined,
        a ? sql`(${images.name}, ${images.version}, ${images.id}) > (${a[0]}, ${a[1]}, ${a[2]})` : undefined,
      ),
    )
    .orderBy(asc(images.name), asc(images.version), asc(images.id))
    .limit(f.limit + 1);
}

/** Parts of uploads in progress, for a page of images. */
export const partsOfImages = (db: Db, ids: string[]) =>
  ids.length ? db.select().from(imageParts).where(inArray(imageParts.imageId, ids)) : Promise.resolve([] as PartRow[]);

const ACTIVE_ROLLOUT = ["running", "paused", "rolling_back"] as const;
const USERS_SHOWN = 20;

/**
 * Who wants an image: channels and live rollouts that resolved it, and servers whose desired
 * config names it (by its name and version, as the index keeps them; a free-form config naming the
 * same strings counts too, which errs on the side of keeping the bytes).
 */
export async function usersOf(db: Db, image: ImageRow, visible: readonly string[] | null = null) {
  const [channels, live, hosts] = await db.batch([
    db
      .select({ fleet: agentChannels.fleetId, agent: agentChannels.agent })
      .from(agentChannels)
      .where(
        and(
          sql`json_extract(${agentChannels.catalog}, '$.image_id') = ${image.id}`,
          inVisibleFleets(agentChannels.fleetId, visible),
        ),
      )
      .limit(USERS_SHOWN),
    db
      .select({ id: rollouts.id, fleet: rollouts.fleetId, state: rollouts.state })
      .from(rollouts)
      .where(
        and(
          inArray(rollouts.state, [...ACTIVE_ROLLOUT]),
          sql`json_extract(${rollouts.catalog}, '$.image_id') = ${image.id}`,
          inVisibleFleets(rollouts.fleetId, visible),
        ),
      )
      .limit(USERS_SHOWN),
    db
      .select({ id: servers.id, fleet: servers.fleetId, hostname: servers.hostname })
      .from(agentInstances)
      .innerJoin(servers, eq(servers.id, agentInstances.serverId))
      .where(
        and(
          eq(agentInstances.desiredImage, image.name),
          eq(agentInstances.desiredVersion, image.version),
          inVisibleFleets(servers.fleetId, visible),
        ),
      )
      .limit(USERS_SHOWN),
  ]);
  return { channels, rollouts: live, servers: hosts };
}

export const inUse = (u: Awaited<ReturnType<typeof usersOf>>) =>
  u.channels.length + u.rollouts.length + u.servers.length > 0;

/** Statements that forget an image and leave its R2 object (and upload) owed a delete. */
export function forgetImage(db: Db, row: ImageRow, at: number) {
  return [
    db.delete(imageParts).where(eq(imageParts.imageId, row.id)),
    db.delete(images).where(eq(images.id, row.id)),
    ...(row.kind === "oci-ref"
      ? []
      : [
          db
            .insert(imageDeletions)
            .values({ key: `images/${row.id}`, uploadId: row.uploadId, at })
            .onConflictDoNothing({ target: imageDeletions.key }),
        ]),
  ] as const;
}

/**
 * Statements that forget an upload abandoned before `before`, with its audit row, only while it
 * still is one when they run: an upload that completed after the sweep read it is left alone
 * (the image ready, its bytes owed no delete, no audit row). The last statement answers the
 * image row it deleted, if any.
 */
export function forgetAbandoned(db: Db, row: ImageRow, before: number, at: number, entry: AuditEntry) {
  const abandoned = and(eq(images.id, row.id), eq(images.state, "uploading"), lt(images.createdAt, before));
  const still = sql`EXISTS (SELECT 1 FROM ${images} WHERE ${abandoned})`;
  const key = imageKey(row.id);
  return [
    auditInsertIf(db, entry, still, at),
    insertWhere(
      db,
      imageDeletions,
      { key, uploadId: row.uploadId, at },
      sql`${still} AND NOT EXISTS (SELECT 1 FROM ${imageDeletions} WHERE ${imageDeletions.key} = ${key})`,
    ),
    db.delete(imageParts).where(and(eq(imageParts.imageId, row.id), still)),
    db.delete(images).where(abandoned).returning({ id: images.id }),
  ] as const;
}

export const abandonedUploads = (db: Db, before: number, limit: number) =>
  db
    .select()
    .from(images)
    .where(and(eq(images.state, "uploading"), lt(images.createdAt, before)))
    .orderBy(asc(images.createdAt))
    .limit(limit);

export const owedDeletions = (db: Db, limit: number) =>
  db.select().from(imageDeletions).orderBy(asc(imageDeletions.at)).limit(limit);
export const deletionDone = (db: Db, key: string) => db.delete(imageDeletions).where(eq(imageDeletions.key, key));

/** The audit action of an upload refused for its bytes (its details: `UploadRefusal`). */
export const UPLOAD_REFUSED = "image.upload_refused";

/**
 * The details of an image's refused upload, as the audit row written in the refusal's own batch
 * recorded them: the one trace left of an image whose bytes were refused, kept for the audit log's
 * retention (src/audit/archive.service.ts). One probe of the (target, id) index.
 */
export const uploadRefusalOf = (db: Db, id: string) =>
  db
    .select({ details: auditLog.details })
    .from(auditLog)
    .where(and(eq(auditLog.target, `image:${id}`), eq(auditLog.action, UPLOAD_REFUSED)))
    .orderBy(desc(auditLog.id))
    .limit(1)
    .get();
