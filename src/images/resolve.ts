/**
 * What a write that names an image stores: a catalog image resolved now (its id, kind, digest,
 * size and source go into the channel, the rollout or the desired config, and a host is given
 * exactly these), or under a fleet with image_policy "any" a free-form image string.
 */
import { eq } from "drizzle-orm";
import type { Db } from "../db/client";
import { fleets } from "../db/schema";
import { notFound } from "../domain/errors";
import type { CatalogFields } from "../domain/images";
import { catalogFieldsOf, resolveImage, type ImageName } from "./service";

export type { ImageName };
export interface ChannelImage {
  image: string;
  version: string;
  catalog?: CatalogFields | null;
}

export async function policyOf(db: Db, fleet: string) {
  const row = await db.query.fleets.findFirst({ columns: { imagePolicy: true }, where: eq(fleets.id, fleet) });
  if (!row) throw notFound("fleet", fleet);
  return row.imagePolicy;
}

/** The image a write names, as stored: resolved against the catalog, or free-form where the fleet allows it. */
export async function imageForFleet(
  db: Db,
  fleet: string,
  named: ImageName,
  policy?: "catalog" | "any",
): Promise<ChannelImage> {
  const row = await resolveImage(db, policy ?? (await policyOf(db, fleet)), named);
  if (row) return { image: row.name, version: row.version, catalog: catalogFieldsOf(row) };
  if ("image_id" in named) throw new Error("unreachable: an id always resolves or refuses");
  return { image: named.image, version: named.version, catalog: null };
}
