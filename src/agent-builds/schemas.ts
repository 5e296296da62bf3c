import { z } from "@hono/zod-openapi";
import { AGENT_ARCHES, AGENT_OSES } from "../domain/enums";

const TARGET = new RegExp(`^(${AGENT_OSES.join("|")})-(${AGENT_ARCHES.join("|")})$`);

/**
 * A build is at most 512 MiB. The request that carries it must also fit the Workers request body
 * limit of the plan (100 MB on the smaller ones), and a Node SEA executable is about 110 MB, so it
 * may be sent gzip-compressed (`Content-Encoding: gzip`, about 40 MB): the Worker decompresses it
 * on its way to R2, which stores and checks the executable itself.
 */
export const MAX_AGENT_BUILD_BYTES = 512 * 1024 * 1024;

export const buildTarget = z
  .string()
  .regex(TARGET, `one of ${AGENT_OSES.flatMap((o) => AGENT_ARCHES.map((a) => `${o}-${a}`)).join(", ")}`)
  .openapi({ example: "linux-x64" });
export const downloadFile = z
  .string()
  .regex(
    new RegExp(`^(${AGENT_OSES.join("|")})-(${AGENT_ARCHES.join("|")})(\\.sha256)?$`),
    "<os>-<arch>, or <os>-<arch>.sha256",
  )
  .openapi({
    description: "`linux-x64` (the build) or `linux-x64.sha256` (its checksum line, for `sha256sum -c`)",
    example: "linux-x64",
  });

const SHA256_HEX = /^[0-9a-f]{64}$/;

export const PublishHeaders = z.object({
  "x-agent-version": z
    .string()
    .regex(/^[0-9A-Za-z][0-9A-Za-z.+_-]{0,63}$/, "a version: letters, digits, '.', '+', '_', '-' (at most 64)")
    .openapi({ description: "The build's version, e.g. 1.4.0" }),
  "x-checksum-sha256": z.string().regex(SHA256_HEX, "64 lower-case hex digits").openapi({
    description: "The body's SHA-256 (hex): R2 refuses a body that does not match, and the previous build stays",
  }),
  "content-length": z
    .string()
    .regex(/^\d{1,12}$/, "the body's length in bytes")
    .optional()
    .openapi({ description: "The body's length (required unless the body is gzip-compressed)" }),
  "content-encoding": z
    .enum(["gzip", "identity"])
    .optional()
    .openapi({ description: "gzip: the body is the build compressed; X-Agent-Size is then required" }),
  "x-agent-size": z
    .string()
    .regex(/^\d{1,12}$/, "the build's length in bytes")
    .optional()
    .openapi({
      description: `The build's own length (uncompressed), at most ${MAX_AGENT_BUILD_BYTES} bytes; required with Content-Encoding: gzip`,
    }),
});

export const AgentBuild = z
  .object({
    os: z.string(),
    arch: z.string(),
    version: z.string(),
    sha256: z.string(),
    size: z.number().int(),
    published_at: z.string(),
    published_by: z.string(),
    url: z.string().openapi({ description: "Where hosts download it (public)" }),
  })
  .openapi("AgentBuild");
