import { createRoute, OpenAPIHono, z } from "@hono/zod-openapi";
import { requireAllFleets, requireScope } from "../auth/principal";
import { actorOf } from "../domain/principal";
import { bearer, commonErrors, errorResponse, jsonResponse, notFoundError } from "../http/openapi";
import type { AppEnv } from "../http/types";
import { validationHook } from "../http/validation";
import { installScript } from "./install";
import { AgentBuild, buildTarget, downloadFile, MAX_AGENT_BUILD_BYTES, PublishHeaders } from "./schemas";
import { buildFileName, buildHead, buildObject, buildView, checksumLine, publishBuild } from "./service";

const tags = ["agent builds"];
const originOf = (url: string) => new URL(url).origin;

/** The agent's builds: published by an admin, downloaded by anyone (install.sh); mounted at /v1/agent. One chain, so hc sees every route. */
export const agentBuildRoutes = new OpenAPIHono<AppEnv>({ defaultHook: validationHook })
  .openapi(
    createRoute({
      method: "put",
      path: "/builds/{target}",
      operationId: "publishAgentBuild",
      tags,
      summary: "Publish the agent's build for one os-arch (hm agent publish); replaces the previous one whole",
      description:
        `The raw executable as the body (Content-Type: application/octet-stream, at most ${MAX_AGENT_BUILD_BYTES} bytes), ` +
        "or gzip-compressed (Content-Encoding: gzip, with X-Agent-Size: its uncompressed length) to fit the Workers request limit; " +
        "streamed to R2. X-Checksum-Sha256 is checked by R2 against what it received: a mismatch (400) stores nothing and the previous build stays.",
      security: bearer,
      middleware: [requireScope("admin"), requireAllFleets] as const,
      request: {
        params: z.object({ target: buildTarget }),
        headers: PublishHeaders,
        body: {
          required: true,
          content: { "application/octet-stream": { schema: z.string().openapi({ format: "binary" }) } },
        },
      },
      responses: { 200: jsonResponse(AgentBuild, "Published"), ...commonErrors },
    }),
    async (c) => {
      const { target } = c.req.valid("param");
      const headers = c.req.valid("header");
      const object = await publishBuild(c.env, actorOf(c.var.principal), target, {
        version: headers["x-agent-version"],
        sha256: headers["x-checksum-sha256"],
        contentLength: headers["content-length"] === undefined ? undefined : Number(headers["content-length"]),
        gzip: headers["content-encoding"] === "gzip",
        size: headers["x-agent-size"] === undefined ? undefined : Number(headers["x-agent-size"]),
        body: c.req.raw.body,
      });
      return c.json(buildView(object, target, originOf(c.req.url)), 200);
    },
  )
  .openapi(
    createRoute({
      method: "get",
      path: "/builds/{target}",
      operationId: "getAgentBuild",
      tags,
      summary: "The published build for one os-arch: version, SHA-256, size",
      security: bearer,
      middleware: [requireScope("read")] as const,
      request: { params: z.object({ target: buildTarget }) },
      responses: { 200: jsonResponse(AgentBuild, "The build"), ...commonErrors, ...notFoundError },
    }),
    async (c) => {
      const { target } = c.req.valid("param");
      return c.json(buildView(await buildHead(c.env, target), target, originOf(c.req.url)), 200);
    },
  )
  .openapi(
    createRoute({
      method: "get",
      path: "/download/{file}",
      operationId: "downloadAgent",
      tags: [...tags, "host agents"],
      summary: "Download the agent (public): `linux-x64`, or its checksum line `linux-x64.sha256`",
      security: [],
      request: { params: z.object({ file: downloadFile }) },
      responses: {
        200: {
          description:
            "The build (with its SHA-256 in X-Checksum-Sha256 and the ETag), or `<hex>  harbormaster-agent-<os>-<arch>`",
          headers: z.object({
            ETag: z.string().openapi({ description: "The build's SHA-256, quoted" }),
            "X-Checksum-Sha256": z.string().openapi({ description: "The build's SHA-256 (hex)" }),
            "X-Agent-Version": z.string(),
          }),
          content: {
            "application/octet-stream": { schema: z.string().openapi({ format: "binary" }) },
            "text/plain": { schema: z.string() },
          },
        },
        400: errorResponse("Not an os-arch this API knows (`invalid_param`)"),
        404: errorResponse("No build is published for it (`not_found`)"),
      },
    }),
    async (c) => {
      const { file } = c.req.valid("param");
      const wantsSum = file.endsWith(".sha256");
      const target = wantsSum ? file.slice(0, -".sha256".length) : file;
      if (wantsSum) {
        const head = await buildHead(c.env, target);
        const { sha256, version } = buildView(head, target, "");
        return c.text(checksumLine(sha256, target), 200, {
          ETag: `"${sha256}"`,
          "X-Checksum-Sha256": sha256,
          "X-Agent-Version": version,
          "Cache-Control": "no-cache",
        });
      }
      const object = await buildObject(c.env, target);
      const { sha256, version } = buildView(object, target, "");
      return c.body(object.body, 200, {
        "Content-Type": "application/octet-stream",
        "Content-Length": String(object.size),
        "Content-Disposition": `attachment; filename="${buildFileName(target)}"`,
        ETag: `"${sha256}"`,
        "X-Checksum-Sha256": sha256,
        "X-Agent-Version": version,
        "Cache-Control": "no-cache",
      });
    },
  );

/** GET /install.sh (public): the installer, naming this deployment's origin. Mounted at /. */
export const installRoutes = new OpenAPIHono<AppEnv>({ defaultHook: validationHook }).openapi(
  createRoute({
    method: "get",
    path: "/install.sh",
    operationId: "getInstallScript",
    tags,
    summary:
      "The agent installer, a POSIX sh script: `curl -fsSL URL/install.sh | sh -s -- --token hme.…` (public; holds no secret)",
    security: [],
    responses: { 200: { description: "The script", content: { "text/x-shellscript": { schema: z.string() } } } },
  }),
  (c) =>
    c.body(installScript(originOf(c.req.url)), 200, {
      "Content-Type": "text/x-shellscript; charset=utf-8",
      "Cache-Control": "no-cache",
    }),
);
