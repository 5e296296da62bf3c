import { z } from "@hono/zod-openapi";

/** The builds the agent ships: Node's names for the platform and the architecture (uname -m x86_64 → x64, aarch64 → arm64). */
export const AGENT_OSES = ["linux"] as const;
export const AGENT_ARCHES = ["x64", "arm64"] as const;
const TARGET = new RegExp(`^(${AGENT_OSES.join("|")})-(${AGENT_ARCHES.join("|")})$`);

/**
 * One request carries one build, so a build is at most the Workers request body limit of the
 * smallest plans (100 MB): a Node SEA executable is about that size uncompressed.
 */
export const MAX_AGENT_BUILD_BYTES = 100_000_000;

export const buildTarget = z.string().regex(TARGET, `one of ${AGENT_OSES.flatMap((o) => AGENT_ARCHES.map((a) => `${o}-${a}`)).join(", ")}`).openapi({ example: "linux-x64" });
export const downloadFile = z
  .string()
  .regex(new RegExp(`^(${AGENT_OSES.join("|")})-(${AGENT_ARCHES.join("|")})(\\.sha256)?$`), "<os>-<arch>, or <os>-<arch>.sha256")
  .openapi({ description: "`linux-x64` (the build) or `linux-x64.sha256` (its checksum line, for `sha256sum -c`)", example: "linux-x64" });

export const SHA256_HEX = /^[0-9a-f]{64}$/;

export const PublishHeaders = z.object({
  "x-agent-version": z.string().regex(/^[0-9A-Za-z][0-9A-Za-z.+_-]{0,63}$/, "a version: letters, digits, '.', '+', '_', '-' (at most 64)").openapi({ description: "The build's version, e.g. 1.4.0" }),
  "x-checksum-sha256": z.string().regex(SHA256_HEX, "64 lower-case hex digits").openapi({ description: "The body's SHA-256 (hex): R2 refuses a body that does not match, and the previous build stays" }),
  "content-length": z.string().regex(/^\d{1,12}$/, "the body's length in bytes").openapi({ description: `At most ${MAX_AGENT_BUILD_BYTES} bytes` }),
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
