import { createRoute, OpenAPIHono, z } from "@hono/zod-openapi";
import { decimalParam } from "../http/paging";
import { requireScope } from "../auth/principal";
import { actorOf } from "../domain/principal";
import { fleetId } from "../fleets/schemas";
import { limitBodies } from "../http/content";
import {
  bearer,
  commonErrors,
  conflictError,
  createdResponse,
  jsonBody,
  jsonResponse,
  notFoundError,
} from "../http/openapi";
import type { AppEnv } from "../http/types";
import { validationHook } from "../http/validation";
import {
  DeliverySchema,
  MAX_WEBHOOK_BODY_BYTES,
  WebhookCreatedSchema,
  WebhookInputSchema,
  WebhookSchema,
} from "./schemas";
import { createWebhook, deleteWebhook, getWebhook, listWebhooks, testWebhook, webhookDeliveries } from "./service";

const fleetParam = z.object({ fleet: fleetId });
const hookParams = fleetParam.extend({ id: z.uuid() });
const tags = ["webhooks"];

/** A fleet's webhooks (docs/notifications.md); mounted at /v1/fleets. One chain, so hc sees every route. */
const webhookRoutes = new OpenAPIHono<AppEnv>({ defaultHook: validationHook });
// A webhook is a few hundred bytes: a body far larger is a mistake, refused before it is read.
webhookRoutes.use("/:fleet/webhooks", limitBodies(MAX_WEBHOOK_BODY_BYTES));

export const webhookApi = webhookRoutes
  .openapi(
    createRoute({
      method: "post",
      path: "/{fleet}/webhooks",
      operationId: "createWebhook",
      tags,
      summary: "Add a webhook: an HTTPS URL, the events it wants, its body format; answers its signing secret once",
      security: bearer,
      middleware: [requireScope("write")] as const,
      request: { params: fleetParam, body: jsonBody(WebhookInputSchema) },
      responses: {
        201: createdResponse(
          WebhookCreatedSchema,
          "Created; the secret is never shown again",
          "The webhook's URL (GET answers it, never its secret)",
        ),
        ...commonErrors,
        ...notFoundError,
        ...conflictError("The fleet has as many webhooks as it may (`too_many_webhooks`)"),
      },
    }),
    async (c) => {
      const { fleet } = c.req.valid("param");
      const created = await createWebhook(c.env, actorOf(c.var.principal), fleet, c.req.valid("json"));
      // The answer wraps the webhook ({webhook, secret}), so its URL is named here.
      c.header(
        "Location",
        `/v1/fleets/${encodeURIComponent(fleet)}/webhooks/${encodeURIComponent(created.webhook.id)}`,
      );
      return c.json(created, 201);
    },
  )
  .openapi(
    createRoute({
      method: "get",
      path: "/{fleet}/webhooks",
      operationId: "listWebhooks",
      tags,
      summary: "The fleet's webhooks (never their secrets)",
      security: bearer,
      middleware: [requireScope("read")] as const,
      request: { params: fleetParam },
      responses: {
        200: jsonResponse(z.object({ items: z.array(WebhookSchema) }), "The webhooks"),
        ...commonErrors,
        ...notFoundError,
      },
    }),
    async (c) => c.json({ items: await listWebhooks(c.env, c.req.valid("param").fleet) }, 200),
  )
  .openapi(
    createRoute({
      method: "get",
      path: "/{fleet}/webhooks/{id}",
      operationId: "getWebhook",
      tags,
      summary: "One webhook",
      security: bearer,
      middleware: [requireScope("read")] as const,
      request: { params: hookParams },
      responses: { 200: jsonResponse(WebhookSchema, "The webhook"), ...commonErrors, ...notFoundError },
    }),
    async (c) => {
      const { fleet, id } = c.req.valid("param");
      return c.json(await getWebhook(c.env, fleet, id), 200);
    },
  )
  .openapi(
    createRoute({
      method: "delete",
      path: "/{fleet}/webhooks/{id}",
      operationId: "deleteWebhook",
      tags,
      summary: "Remove a webhook; deliveries still pending are given up",
      security: bearer,
      middleware: [requireScope("write")] as const,
      request: { params: hookParams },
      responses: { 200: jsonResponse(WebhookSchema, "Removed"), ...commonErrors, ...notFoundError },
    }),
    async (c) => {
      const { fleet, id } = c.req.valid("param");
      return c.json(await deleteWebhook(c.env, actorOf(c.var.principal), fleet, id), 200);
    },
  )
  .openapi(
    createRoute({
      method: "get",
      path: "/{fleet}/webhooks/{id}/deliveries",
      operationId: "listWebhookDeliveries",
      tags,
      summary: "The webhook's deliveries, newest first: status, attempts, last answer or error",
      security: bearer,
      middleware: [requireScope("read")] as const,
      request: { params: hookParams, query: z.object({ limit: decimalParam(1, 200).default(50) }) },
      responses: {
        200: jsonResponse(z.object({ items: z.array(DeliverySchema) }), "The deliveries"),
        ...commonErrors,
        ...notFoundError,
      },
    }),
    async (c) => {
      const { fleet, id } = c.req.valid("param");
      return c.json({ items: await webhookDeliveries(c.env, fleet, id, c.req.valid("query").limit) }, 200);
    },
  )
  .openapi(
    createRoute({
      method: "post",
      path: "/{fleet}/webhooks/{id}/test",
      operationId: "testWebhook",
      tags,
      summary: "Send a webhook.test event to this webhook now; answers the delivery after its first attempt",
      security: bearer,
      middleware: [requireScope("write")] as const,
      request: { params: hookParams },
      responses: {
        202: jsonResponse(DeliverySchema, "Sent (or being retried: see its status)"),
        ...commonErrors,
        ...notFoundError,
      },
    }),
    async (c) => {
      const { fleet, id } = c.req.valid("param");
      return c.json(await testWebhook(c.env, actorOf(c.var.principal), fleet, id), 202);
    },
  );
