import { createRoute, OpenAPIHono } from "@hono/zod-openapi";
import { requireScope } from "../auth/principal";
import { DomainError } from "../domain/errors";
import { actorOf } from "../domain/principal";
import { bearer, commonErrors, conflictError, jsonResponse, notFoundError } from "../http/openapi";
import type { AppEnv } from "../http/types";
import { validationHook } from "../http/validation";
import { DecommissionInput, fleetOfHostname, ServerDetail, serverIdParam, ServerToken } from "./schemas";
import {
  cancelDecommission,
  decommissionServer,
  refreshServer,
  releaseServer,
  resolveServer,
  rotateServerToken,
} from "./service";
import { serverDetail } from "./store";

/** A server's lifecycle and planning: release of a pin, decommission and its cancel, token rotation, refresh. */

/** POST /{id}/…: an action on one server, answered with the server as it now is. */
const serverAction = <P extends string>(
  path: P,
  a: {
    operationId: string;
    summary: string;
    description?: string;
    answer: string;
    conflicts: string;
  },
) =>
  createRoute({
    method: "post",
    path,
    operationId: a.operationId,
    tags: ["servers"],
    summary: a.summary,
    description: a.description,
    security: bearer,
    middleware: [requireScope("write")] as const,
    request: { params: serverIdParam },
    parameters: [fleetOfHostname],
    responses: {
      200: jsonResponse(ServerDetail, a.answer),
      ...commonErrors,
      ...notFoundError,
      ...conflictError(a.conflicts),
    },
  });

// One chain, so the type of this router (and of the app that mounts it) carries every route for hc.
export const serverLifecycleRoutes = new OpenAPIHono<AppEnv>({ defaultHook: validationHook })
  .openapi(
    serverAction("/{id}/desired/release", {
      operationId: "releaseDesiredConfig",
      summary: "Release a pinned server back to planning; it is re-planned at once",
      description:
        "An operator's explicit PUT /v1/servers/{id}/desired pins the server: the planner leaves its agents alone. " +
        "Releasing hands it back: agents it runs keep their images, the rest follow its roles, the fleet's capabilities " +
        "and channels; a new generation is issued only if that differs from the current config.",
      answer: "The server, planned again",
      conflicts: "server_removed",
    }),
    async (c) => {
      const id = await resolveServer(c.env, c.var.principal, c.req.valid("param").id, c.req.query("fleet"));
      const out = await releaseServer(c.env, actorOf(c.var.principal), id);
      return c.json(serverDetail(out.view), 200);
    },
  )
  .openapi(
    createRoute({
      method: "post",
      path: "/{id}/decommission",
      operationId: "decommissionServer",
      tags: ["servers"],
      summary:
        "Decommission a server: terminate (managed) or uninstall (manual, only when nothing is assigned or attached)",
      description:
        "The server becomes `decommissioning` and its next generation carries the order, with no agents. When the host " +
        "acknowledges (a report at that generation with no agents and no errors), cleanup runs to the end — its instances " +
        "leave the index, its token stops, it leaves every reboot semaphore and frees its fleetlock_id — and only then " +
        "is it `removed` (listable with ?state=removed). With `force` (admin, reason required) cleanup starts at once.",
      security: bearer,
      middleware: [requireScope("write")] as const,
      request: {
        params: serverIdParam,
        body: { required: false, content: { "application/json": { schema: DecommissionInput } } },
      },
      parameters: [fleetOfHostname],
      responses: {
        200: jsonResponse(ServerDetail, "The server, decommissioning (or removed)"),
        ...commonErrors,
        ...notFoundError,
        ...conflictError("uninstall_blocked (names each unit and attachment), server_removed"),
      },
    }),
    async (c) => {
      const id = await resolveServer(c.env, c.var.principal, c.req.valid("param").id, c.req.query("fleet"));
      const body = (c.req.valid("json") as DecommissionInput | undefined) ?? { force: false };
      const principal = c.var.principal;
      if (body.force && !(principal.kind === "operator" && principal.scope === "admin")) {
        throw new DomainError("forbidden", "force decommission needs a token with scope 'admin'");
      }
      const out = await decommissionServer(c.env, actorOf(principal), id, {
        force: body.force ? { reason: body.reason! } : undefined,
      });
      return c.json(serverDetail(out.view), 200);
    },
  )
  .openapi(
    serverAction("/{id}/decommission/cancel", {
      operationId: "cancelDecommission",
      summary: "Cancel a decommission the host has not acknowledged; the next generation orders run again",
      answer: "The server, back to its previous state and agents",
      conflicts: "not_decommissioning, decommission_acknowledged, server_removed",
    }),
    async (c) => {
      const id = await resolveServer(c.env, c.var.principal, c.req.valid("param").id, c.req.query("fleet"));
      const out = await cancelDecommission(c.env, actorOf(c.var.principal), id);
      return c.json(serverDetail(out.view), 200);
    },
  )
  .openapi(
    createRoute({
      method: "post",
      path: "/{id}/token",
      operationId: "rotateServerToken",
      tags: ["servers"],
      summary: "Rotate the server's token: the new one is answered once, the old one stops at once",
      security: bearer,
      middleware: [requireScope("write")] as const,
      request: { params: serverIdParam },
      parameters: [fleetOfHostname],
      responses: {
        200: jsonResponse(ServerToken, "The new token (shown only here)"),
        ...commonErrors,
        ...notFoundError,
        ...conflictError("server_removed, token_rotated (another rotation committed first)"),
      },
    }),
    async (c) => {
      const id = await resolveServer(c.env, c.var.principal, c.req.valid("param").id, c.req.query("fleet"));
      const out = await rotateServerToken(c.env, actorOf(c.var.principal), id);
      return c.json({ id, token: out.token }, 200);
    },
  )
  .openapi(
    serverAction("/{id}/refresh", {
      operationId: "refreshServer",
      summary: "Ask the host to report again now",
      description:
        "While the refresh is pending, the host's desired poll answers 200 even with a current If-None-Match, naming " +
        "the refresh in the body, and a parked long poll wakes. The server shows when it was requested and when the " +
        "first report after it answered it.",
      answer: "The server, with its pending refresh",
      conflicts: "server_removed",
    }),
    async (c) => {
      const id = await resolveServer(c.env, c.var.principal, c.req.valid("param").id, c.req.query("fleet"));
      const out = await refreshServer(c.env, actorOf(c.var.principal), id);
      return c.json(serverDetail(out.view), 200);
    },
  );
