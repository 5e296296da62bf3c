import { createRoute, OpenAPIHono, z } from "@hono/zod-openapi";
import { requireAllFleets, requireScope } from "../auth/principal";
import { actorOf, visibleFleets } from "../domain/principal";
import { MAX_PART_BYTES } from "../domain/images";
import {
  bearer,
  commonErrors,
  conflictError,
  errorResponse,
  jsonBody,
  jsonResponse,
  notFoundError,
} from "../http/openapi";
import type { AppEnv } from "../http/types";
import { validationHook } from "../http/validation";
import { Image, ImageInput, ImageWithUsers, imageParam, listQuery, PartReceived, partParams } from "./schemas";
import { completeUpload, deleteImage, getImage, listCatalog, putPart, registerImage } from "./service";

const tags = ["images"];

/** The image catalog (docs/images-and-enrollment.md); mounted at /v1/images. One chain, so hc sees every route. */
export const imageRoutes = new OpenAPIHono<AppEnv>({ defaultHook: validationHook })
  .openapi(
    createRoute({
      method: "post",
      path: "/",
      operationId: "registerImage",
      tags,
      summary:
        "Register an image: an oci-ref is ready at once; an oci-archive or tarball then uploads its parts and completes",
      description:
        "The same name, version and content again answers the image as it is (200), with the upload parts already received: " +
        "a client that lost its connection resumes from there. The same name and version with other content, labels or " +
        "description is 409 `image_conflict`.",
      security: bearer,
      middleware: [requireScope("write"), requireAllFleets] as const,
      request: { body: jsonBody(ImageInput) },
      responses: {
        201: jsonResponse(Image, "Registered"),
        200: jsonResponse(Image, "Already registered with this content"),
        ...commonErrors,
        ...conflictError(
          "The name and version are registered with other content, labels or description (`image_conflict`)",
        ),
      },
    }),
    async (c) => {
      const { created, image } = await registerImage(c.env, actorOf(c.var.principal), c.req.valid("json"));
      return created ? c.json(image, 201) : c.json(image, 200);
    },
  )
  .openapi(
    createRoute({
      method: "get",
      path: "/",
      operationId: "listImages",
      tags,
      summary: "The catalog, by name then version, paged; filter by name and version",
      security: bearer,
      middleware: [requireScope("read")] as const,
      request: { query: listQuery },
      responses: {
        200: jsonResponse(z.object({ items: z.array(Image), next_cursor: z.string().nullable() }), "A page of images"),
        ...commonErrors,
      },
    }),
    async (c) => c.json(await listCatalog(c.env, c.req.valid("query")), 200),
  )
  .openapi(
    createRoute({
      method: "get",
      path: "/{id}",
      operationId: "getImage",
      tags,
      summary: "One image, who wants it (channels, live rollouts, servers), and while uploading the parts received",
      security: bearer,
      middleware: [requireScope("read")] as const,
      request: { params: imageParam },
      responses: { 200: jsonResponse(ImageWithUsers, "The image"), ...commonErrors, ...notFoundError },
    }),
    async (c) => c.json(await getImage(c.env, c.req.valid("param").id, visibleFleets(c.var.principal)), 200),
  )
  .openapi(
    createRoute({
      method: "put",
      path: "/{id}/parts/{part}",
      operationId: "putImagePart",
      tags,
      summary:
        "Upload one part of an image's bytes (raw body, Content-Length the part's exact size); sending a part again replaces it",
      description:
        `Parts are numbered from 1; each is \`part_size\` bytes (at most ${MAX_PART_BYTES}) but the last, which holds the rest. ` +
        "The body streams to storage; one that ends before its Content-Length is not recorded (400 `invalid_part`).",
      security: bearer,
      middleware: [requireScope("write"), requireAllFleets] as const,
      request: {
        params: partParams,
        body: {
          required: true,
          content: { "application/octet-stream": { schema: z.string().openapi({ format: "binary" }) } },
        },
      },
      responses: {
        200: jsonResponse(PartReceived, "Received; the upload's parts so far"),
        ...commonErrors,
        413: errorResponse(`The part is over ${MAX_PART_BYTES} bytes (\`payload_too_large\`)`),
        415: errorResponse("The body is not application/octet-stream (`unsupported_media_type`)"),
        ...notFoundError,
        ...conflictError("The image is not uploading: complete already, or a reference (`invalid_state`)"),
      },
    }),
    async (c) => {
      const { id, part } = c.req.valid("param");
      const length = c.req.header("Content-Length");
      const answer = await putPart(
        c.env,
        id,
        part,
        length && /^\d+$/.test(length) ? Number(length) : null,
        c.req.raw.body,
      );
      return c.json(answer, 200);
    },
  )
  .openapi(
    createRoute({
      method: "post",
      path: "/{id}/complete",
      operationId: "completeImageUpload",
      tags,
      summary: "Assemble the parts and check the digest: ready, or refused and nothing kept",
      security: bearer,
      middleware: [requireScope("write"), requireAllFleets] as const,
      request: { params: imageParam },
      responses: {
        200: jsonResponse(Image, "The image, ready (also when it already was)"),
        ...commonErrors,
        ...notFoundError,
        ...conflictError(
          "Parts are missing (`upload_incomplete` lists them), or the image is a reference (`invalid_state`)",
        ),
        422: errorResponse(
          "The bytes' sha256 is not the registered digest (`digest_mismatch`): the image and its bytes are gone; the completion sent again gets the same refusal",
        ),
      },
    }),
    async (c) => c.json(await completeUpload(c.env, actorOf(c.var.principal), c.req.valid("param").id), 200),
  )
  .openapi(
    createRoute({
      method: "delete",
      path: "/{id}",
      operationId: "deleteImage",
      tags,
      summary: "Remove an image and its bytes; refused while a channel, a live rollout or a server wants it",
      security: bearer,
      middleware: [requireScope("write"), requireAllFleets] as const,
      request: { params: imageParam },
      responses: {
        200: jsonResponse(Image, "Removed"),
        ...commonErrors,
        ...notFoundError,
        ...conflictError("Still wanted (`image_in_use`; details name the channels, rollouts and servers)"),
      },
    }),
    async (c) => c.json(await deleteImage(c.env, actorOf(c.var.principal), c.req.valid("param").id), 200),
  );
