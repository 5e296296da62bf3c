import { z, type OpenAPIHono } from "@hono/zod-openapi";
import { ErrorSchema } from "./openapi";

type DocumentConfig = Parameters<OpenAPIHono["getOpenAPI31Document"]>[0];

/** The document's fixed parts: `servers` is the deployment serving it, whatever its host. */
export const DOCUMENT_CONFIG: DocumentConfig = {
  openapi: "3.1.0",
  info: {
    title: "Harbormaster",
    version: "0.1.0",
    description:
      "Control plane for the agents that run on a fleet of servers. Every answer carries `X-Request-Id` " +
      "(the one the request sent when it is a plain token, else a new one); error bodies repeat it.",
  },
  servers: [{ url: "/", description: "The deployment serving this document" }],
};

/** The endpoints outside the resource routers, documented so every answer the API gives is. */
export function registerServiceEndpoints(registry: OpenAPIHono["openAPIRegistry"]) {
  registry.registerPath({
    method: "get",
    path: "/healthz",
    operationId: "getHealth",
    tags: ["service"],
    summary: "Liveness",
    security: [],
    responses: {
      200: { description: "Alive", content: { "application/json": { schema: z.object({ ok: z.literal(true) }) } } },
    },
  });
  registry.registerPath({
    method: "get",
    path: "/metrics",
    operationId: "getMetrics",
    tags: ["service"],
    summary: "Prometheus gauges computed from durable state (servers, instances, reboot groups, data version)",
    description:
      "Needs a read token (Prometheus: `authorization: { credentials: <token> }` in the scrape config) " +
      'unless the deployment sets METRICS_PUBLIC = "true". Computed at most every 15 s per isolate.',
    security: [{ Bearer: [] }, {}],
    responses: {
      200: { description: "Metrics", content: { "text/plain": { schema: z.string() } } },
      401: {
        description: "Missing or invalid bearer token",
        headers: z.object({ "WWW-Authenticate": z.string() }),
        content: { "application/json": { schema: ErrorSchema } },
      },
      403: { description: "The token cannot read", content: { "application/json": { schema: ErrorSchema } } },
    },
  });
}

type Doc = {
  components?: { headers?: Record<string, unknown> };
  paths?: Record<string, Record<string, { responses?: Record<string, { headers?: Record<string, unknown> }> }>>;
};

/** Every answer of every operation carries X-Request-Id; documented once and referenced everywhere. */
export function withRequestIdHeaders<D extends object>(doc: D): D {
  const d = doc as D & Doc;
  d.components = {
    ...d.components,
    headers: {
      ...d.components?.headers,
      XRequestId: {
        description:
          "The request's id: the X-Request-Id it sent (a plain token of at most 255 characters), else a new uuid",
        schema: { type: "string" },
      },
    },
  };
  for (const item of Object.values(d.paths ?? {})) {
    for (const op of Object.values(item)) {
      for (const response of Object.values(op.responses ?? {})) {
        response.headers = { ...response.headers, "X-Request-Id": { $ref: "#/components/headers/XRequestId" } };
      }
    }
  }
  return d;
}
