import { z } from "@hono/zod-openapi";
import {
  DEFAULT_PART_BYTES,
  DIGEST,
  IMAGE_KINDS,
  MAX_DESCRIPTION_LENGTH,
  MAX_IMAGE_BYTES,
  MAX_IMAGE_LABELS,
  MAX_LABEL_KEY_LENGTH,
  MAX_LABEL_VALUE_LENGTH,
  MAX_PART_BYTES,
  MAX_PARTS,
  MIN_PART_BYTES,
  PINNED_REF,
} from "../domain/images";
import { agentName, versionString } from "../model/server/schemas";
import { cursorParam, limitParam, decimalParam } from "../http/paging";
import { userKeyed } from "../lib/user-keys";

const imageKind = z.enum(IMAGE_KINDS);
const digest = z.string().regex(DIGEST, "a digest is 'sha256:' and 64 lowercase hex digits");
const LABEL_KEY = /^[a-z0-9]([a-z0-9._/-]*[a-z0-9])?$/;

export const ImageInput = z
  .strictObject({
    name: agentName.openapi({ description: "The agent this image is a build of" }),
    version: versionString,
    kind: imageKind,
    digest,
    size: z
      .number()
      .int()
      .min(0)
      .max(Number.MAX_SAFE_INTEGER)
      .openapi({ description: "Bytes (for oci-ref: as the registry says)" }),
    ref: z
      .string()
      .max(512)
      .regex(PINNED_REF, "a reference pinned by digest: registry/org/name@sha256:<64 hex>")
      .optional()
      .openapi({ description: "oci-ref only: the image in an existing registry, pinned by digest" }),
    labels: userKeyed(
      z
        .record(
          z.string().max(MAX_LABEL_KEY_LENGTH).regex(LABEL_KEY, "label keys are a-z, 0-9, '.', '_', '/', '-'"),
          z.string().max(MAX_LABEL_VALUE_LENGTH),
        )
        .refine((l) => Object.keys(l).length <= MAX_IMAGE_LABELS, `at most ${MAX_IMAGE_LABELS} labels`),
    ).default({}),
    description: z.string().max(MAX_DESCRIPTION_LENGTH).optional(),
    part_size: z
      .number()
      .int()
      .min(MIN_PART_BYTES)
      .max(MAX_PART_BYTES)
      .default(DEFAULT_PART_BYTES)
      .openapi({ description: "Stored kinds: the bytes of each upload part but the last (5-50 MiB, default 50 MiB)" }),
  })
  .superRefine((v, ctx) => {
    if (v.kind === "oci-ref") {
      if (!v.ref) ctx.addIssue({ code: "custom", path: ["ref"], message: "an oci-ref image names its ref" });
      else if (!v.ref.endsWith(`@${v.digest}`))
        ctx.addIssue({ code: "custom", path: ["ref"], message: "the ref's digest is not the image's digest" });
    } else {
      if (v.ref !== undefined)
        ctx.addIssue({ code: "custom", path: ["ref"], message: `a ${v.kind} image is uploaded, not referenced` });
      if (v.size > MAX_IMAGE_BYTES)
        ctx.addIssue({ code: "custom", path: ["size"], message: `images are at most ${MAX_IMAGE_BYTES} bytes` });
      if (v.size === 0)
        ctx.addIssue({ code: "custom", path: ["size"], message: "an uploaded image has at least one byte" });
    }
  })
  .openapi("ImageInput");
export type ImageInput = z.infer<typeof ImageInput>;

const UploadState = z
  .object({
    part_size: z.number().int(),
    parts: z.number().int().openapi({ description: "How many parts the image is uploaded in" }),
    received: z
      .array(z.number().int())
      .openapi({ description: "The parts already received, in order: send the others" }),
  })
  .openapi("ImageUpload");

const ImageUser = z.object({
  channels: z.array(z.object({ fleet: z.string(), agent: z.string() })),
  rollouts: z.array(z.object({ id: z.string(), fleet: z.string(), state: z.string() })),
  servers: z.array(z.object({ id: z.string(), fleet: z.string(), hostname: z.string() })),
});

export const Image = z
  .object({
    id: z.uuid(),
    name: z.string(),
    version: z.string(),
    kind: imageKind,
    digest: z.string(),
    size: z.number().int(),
    ref: z.string().nullable(),
    labels: z.record(z.string(), z.string()),
    description: z.string().nullable(),
    state: z.enum(["uploading", "ready"]),
    created_at: z.string(),
    created_by: z.string(),
    upload: UploadState.optional().openapi({ description: "While uploading: the parts expected and received" }),
  })
  .openapi("Image");
export type Image = z.infer<typeof Image>;

export const ImageWithUsers = Image.extend({ used_by: ImageUser.optional() }).openapi("ImageWithUsers");

export const imageParam = z.object({ id: z.uuid() });
export const partParams = imageParam.extend({ part: decimalParam(1, MAX_PARTS) });
export const listQuery = z.object({
  name: agentName.optional(),
  version: versionString.optional(),
  limit: limitParam,
  cursor: cursorParam,
});
export const PartReceived = z
  .object({ part: z.number().int(), size: z.number().int(), upload: UploadState })
  .openapi("ImagePartReceived");

/**
 * What the audit row of an upload refused for its bytes keeps: enough to answer a completion sent
 * again (its first answer lost) with the same refusal.
 */
export const UploadRefusal = z.object({
  expected: z.string(),
  actual: z.string().nullable(),
  size: z.number().nullable(),
  registered_size: z.number(),
});
export type UploadRefusal = z.infer<typeof UploadRefusal>;
