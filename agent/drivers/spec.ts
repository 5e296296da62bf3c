import { z } from "zod";
import type { AgentSpec } from "../../src/model/server/schemas.ts";

/** The protocol's agent names (src/model/server/schemas.ts AGENT_NAME): a report naming another is refused whole. */
export const AGENT_NAME = /^[a-z0-9][a-z0-9._-]{0,62}$/;

/**
 * An agent as the protocol can report it, from what a machine says (labels, files anyone could
 * have edited): empty or overlong fields are replaced or cut so that one odd agent does not get
 * the whole report refused.
 */
export function reportable(
  name: string,
  image: string | undefined,
  version: string | undefined,
  instanceId: string | undefined,
) {
  return {
    name,
    image: (image || "unknown").slice(0, 512),
    version: (version || "unknown").slice(0, 128),
    instance_id: (instanceId || "unknown").slice(0, 128),
  };
}

export const IMAGE_KINDS = ["oci-archive", "tarball", "oci-ref"] as const;
export type ImageKind = (typeof IMAGE_KINDS)[number];

const digest = z.string().regex(/^sha256:[0-9a-f]{64}$/, "a digest is sha256:<64 lowercase hex>");

/**
 * What the desired config says of a catalog image (the optional fields of AgentSpec): where its
 * bytes are and what they must hash to. Free-form images have none of them.
 */
const CatalogFields = z.object({
  image_id: z.string().min(1).max(128),
  kind: z.enum(IMAGE_KINDS),
  digest,
  size: z.number().int().min(0).optional(),
  source: z.union([
    z.object({ blob: z.string().regex(/^\/[^\s]*$/, "a blob source is a path on the control plane") }),
    z.object({ ref: z.string().min(1).max(512) }),
  ]),
});

export type CatalogImage = z.infer<typeof CatalogFields>;

/** An agent spec as the drivers read it: what the protocol sends, catalog fields included when present. */
export type DriverSpec = AgentSpec & Partial<CatalogImage>;

/**
 * The spec's catalog image, or null for a free-form image (no `kind`). A spec that names a kind
 * but whose other fields do not fit throws: nothing is installed from a half-described image.
 */
export function catalogImage(spec: AgentSpec): CatalogImage | null {
  const s = spec as DriverSpec;
  if (s.kind === undefined) return null;
  const parsed = CatalogFields.safeParse(s);
  if (!parsed.success) {
    const why = parsed.error.issues.map((i) => `${i.path.join(".") || "spec"}: ${i.message}`).join("; ");
    throw new Error(`the desired config's image for ${spec.name} is not usable: ${why}`);
  }
  const img = parsed.data;
  if (img.kind === "oci-ref" && !("ref" in img.source))
    throw new Error(`image ${spec.image} is an oci-ref without a ref`);
  if (img.kind !== "oci-ref" && !("blob" in img.source))
    throw new Error(`image ${spec.image} is stored (${img.kind}) but has no blob path`);
  return img;
}
