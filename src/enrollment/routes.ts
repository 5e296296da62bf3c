import { createRoute, OpenAPIHono, z } from "@hono/zod-openapi";
import { createMiddleware } from "hono/factory";
import { requireScope } from "../auth/principal";
import { actorOf } from "../domain/principal";
import { bearer, commonErrors, conflictError, jsonBody, jsonResponse, notFoundError } from "../http/openapi";
import { cursorParam, decodeCursor, limitParam, page } from "../http/paging";
import type { AppEnv } from "../http/types";
import { validationHook } from "../http/validation";
import { ServerCreated } from "../servers/schemas";
import { fleetParam } from "../fleets/schemas";
import { serverDetail } from "../servers/store";
import {
  EnrollInput,
  EnrollmentToken,
  EnrollmentTokenCreated,
  EnrollmentTokenInput,
  idempotencyHeaders,
  REPLAYED_HEADER,
  tokenParams,
} from "./schemas";
import {
  createEnrollmentToken,
  enroll,
  enrollmentTokenView,
  getEnrollmentToken,
  listFleetEnrollmentTokens,
  liveEnrollmentToken,
  revokeFleetEnrollmentToken,
} from "./service";

const tags = ["enrollment"];

/** A fleet's enrollment tokens (docs/images-and-enrollment.md); mounted at /v1/fleets. One chain, so hc sees every route. */
export const enrollmentTokenRoutes = new OpenAPIHono<AppEnv>({ defaultHook: validationHook })
  .openapi(
    createRoute({
      method: "post",
      path: "/{fleet}/enrollment-tokens",
      operationId: "createEnrollmentToken",
      tags,
      summary: "A token that lets machines register themselves in the fleet (POST /v1/agent/enroll); answered once",
      description:
        "With an `Idempotency-Key`, a retry whose first answer was lost is safe: the same key (from the same " +
        "creator) with the same request answers the token that key made, 201 again, with its secret issued anew " +
        "(the secret is never stored; the one the lost answer carried stops working). The same key with another " +
        "request, or once the token was used, revoked or expired, is 409 `idempotency_key_reused`. The key is kept as long as the token.",
      security: bearer,
      middleware: [requireScope("write")] as const,
      request: { params: fleetParam, headers: idempotencyHeaders, body: jsonBody(EnrollmentTokenInput) },
      responses: {
        201: {
          ...jsonResponse(
            EnrollmentTokenCreated,
            "Created (or, for a retried key, the token it created); the token is never shown again",
          ),
          headers: z.object({
            [REPLAYED_HEADER]: z
              .literal("true")
              .optional()
              .openapi({ description: "The token this Idempotency-Key created before, its secret issued again" }),
          }),
        },
        ...commonErrors,
        ...notFoundError,
        ...conflictError(
          "idempotency_key_reused: the key made a token with another request, or that token was used, revoked or expired",
        ),
      },
    }),
    async (c) => {
      const { fleet } = c.req.valid("param");
      const key = c.req.valid("header")["idempotency-key"];
      const { replayed, ...created } = await createEnrollmentToken(
        c.env,
        actorOf(c.var.principal),
        fleet,
        c.req.valid("json"),
        key,
      );
      if (replayed) c.header(REPLAYED_HEADER, "true");
      return c.json(created, 201);
    },
  )
  .openapi(
    createRoute({
      method: "get",
      path: "/{fleet}/enrollment-tokens",
      operationId: "listEnrollmentTokens",
      tags,
      summary: "The fleet's enrollment tokens, revoked and expired ones included (never their secrets)",
      security: bearer,
      middleware: [requireScope("read")] as const,
      request: { params: fleetParam, query: z.object({ limit: limitParam, cursor: cursorParam }) },
      responses: {
        200: jsonResponse(
          z.object({ items: z.array(EnrollmentToken), next_cursor: z.string().nullable() }),
          "A page of tokens, by id",
        ),
        ...commonErrors,
        ...notFoundError,
      },
    }),
    async (c) => {
      const { fleet } = c.req.valid("param");
      const { limit, cursor } = c.req.valid("query");
      const after = decodeCursor(cursor, 1);
      const rows = await listFleetEnrollmentTokens(c.env, fleet, after ? after[0] : null, limit);
      const { items, next_cursor } = page(rows, limit, (r) => [r.id]);
      const now = Date.now();
      return c.json({ items: items.map((r) => enrollmentTokenView(r, now)), next_cursor }, 200);
    },
  )
  .openapi(
    createRoute({
      method: "get",
      path: "/{fleet}/enrollment-tokens/{id}",
      operationId: "getEnrollmentToken",
      tags,
      summary: "One enrollment token (never its secret)",
      security: bearer,
      middleware: [requireScope("read")] as const,
      request: { params: tokenParams },
      responses: { 200: jsonResponse(EnrollmentToken, "The token"), ...commonErrors, ...notFoundError },
    }),
    async (c) => {
      const { fleet, id } = c.req.valid("param");
      return c.json(await getEnrollmentToken(c.env, fleet, id), 200);
    },
  )
  .openapi(
    createRoute({
      method: "delete",
      path: "/{fleet}/enrollment-tokens/{id}",
      operationId: "revokeEnrollmentToken",
      tags,
      summary:
        "Revoke an enrollment token: it enrolls nothing more, retries included (enrolled servers keep their tokens)",
      security: bearer,
      middleware: [requireScope("write")] as const,
      request: { params: tokenParams },
      responses: {
        200: jsonResponse(EnrollmentToken, "Revoked (or already revoked)"),
        ...commonErrors,
        ...notFoundError,
      },
    }),
    async (c) => {
      const { fleet, id } = c.req.valid("param");
      return c.json(await revokeFleetEnrollmentToken(c.env, actorOf(c.var.principal), fleet, id), 200);
    },
  );

/**
 * The token is checked before the body is validated, as the operator routes' scope check is: a
 * caller without a live enrollment token learns 401, not what a valid body looks like.
 * (enroll checks it again, with the rest of the protocol.)
 */
const requireEnrollmentToken = createMiddleware<AppEnv>(async (c, next) => {
  await liveEnrollmentToken(c.env, c.req.header("Authorization"), Date.now());
  await next();
});

/** POST /v1/agent/enroll: a machine registers itself with an enrollment token; mounted at /v1/agent. */
export const enrollRoutes = new OpenAPIHono<AppEnv>({ defaultHook: validationHook }).openapi(
  createRoute({
    method: "post",
    path: "/enroll",
    operationId: "enrollServer",
    tags: ["host agents", ...tags],
    summary: "Register this machine with an enrollment token (Bearer hme.…); the server's token is answered once",
    description:
      "Registers the server as POST /v1/servers does, with the token's fleet, roles, reboot group and kind. " +
      "A retry from the same `machine_id` while the token lives (the first answer was lost) answers the same " +
      "server with a fresh token and revokes the previous one; it spends no use. 401 for a token that is not " +
      "an enrollment token, or is revoked, expired or used up; 403 `hostname_not_allowed` outside the token's " +
      "hostname pattern; 409 `hostname_taken`, or `machine_enrolled` for a retry under another hostname.",
    security: bearer,
    middleware: [requireEnrollmentToken] as const,
    request: { body: jsonBody(EnrollInput) },
    responses: {
      201: jsonResponse(ServerCreated, "The server, with its token"),
      ...commonErrors,
      ...conflictError(
        "hostname_taken, fleetlock_id_taken, or machine_enrolled (this machine was enrolled under another hostname)",
      ),
    },
  }),
  async (c) => {
    const { view, token } = await enroll(c.env, c.req.header("Authorization"), c.req.valid("json"));
    return c.json({ ...serverDetail(view), token }, 201);
  },
);
