import { createRoute, OpenAPIHono, z } from "@hono/zod-openapi";
import { decimalParam } from "../http/paging";
import { requireScope } from "../auth/principal";
import { actorOf } from "../domain/principal";
import { fleetParam } from "../fleets/schemas";
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
import {
  createWebhook,
  deleteWebhook,
  getWebhook,
  listWebhooks,
  testWebhook,
  webhookDeliveries,
  webhookDelivery,
} from "./service";

const hookParams = fleetParam.extend({ id: z.uuid() });
const deliveryParams = hookParams.extend({ delivery: z.uuid() });
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
      method: "get",
      path: "/{fleet}/webhooks/{id}/deliveries/{delivery}",
      operationId: "getWebhookDelivery",
      tags,
      summary: "One delivery: its status, attempts, last answer or error (a test's outcome)",
      security: bearer,
      middleware: [requireScope("read")] as const,
      request: { params: deliveryParams },
      responses: {
        200: jsonResponse(DeliverySchema, "The delivery"),
        ...commonErrors,
        ...notFoundError,
      },
    }),
    async (c) => {
      const { fleet, id, delivery } = c.req.valid("param");
      return c.json(await webhookDelivery(c.env, fleet, id, delivery), 200);
    },
  )
  .openapi(
    createRoute({
      method: "post",
      path: "/{fleet}/webhooks/{id}/test",
      operationId: "testWebhook",
      tags,
      summary: "Queue a webhook.test event to this webhook; answers at once, the outcome is read at Location",
      description:
        "The test is sent as every delivery is, at once and without holding the request: a receiver " +
        "that does not answer delays nothing. The 202 carries the delivery (pending, no attempt yet) " +
        "and `Location`, the delivery's URL, whose `status`, `last_status` and `last_error` say how " +
        "its first attempt went once `attempts` is 1 (an attempt takes 10 s at most).",
      security: bearer,
      middleware: [requireScope("write")] as const,
      request: { params: hookParams },
      responses: {
        202: {
          ...jsonResponse(DeliverySchema, "Queued: its outcome is read at Location"),
          headers: z.object({
            Location: z.string().openapi({
              description: "The delivery's URL (GET …/webhooks/{id}/deliveries/{delivery})",
              example: "/v1/fleets/prod/webhooks/7ceacfbe-c1b4-44da-8194-c800acd825cd/deliveries/…",
            }),
          }),
        },
        ...commonErrors,
        ...notFoundError,
      },
    }),
    async (c) => {
      const { fleet, id } = c.req.valid("param");
      const delivery = await testWebhook(c.env, actorOf(c.var.principal), fleet, id);
      c.header("Location", `/v1/fleets/${fleet}/webhooks/${id}/deliveries/${delivery.id}`);
      return c.json(delivery, 202);
    },
  );
