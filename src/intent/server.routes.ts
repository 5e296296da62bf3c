import { createRoute, OpenAPIHono } from "@hono/zod-openapi";
import { actorOf, requireScope } from "../auth/principal";
import { ServerDetail, serverIdParam } from "../fleet/schemas";
import { serverDetail } from "../fleet/servers";
import { bearer, commonErrors, conflictError, jsonResponse, notFoundError } from "../http/openapi";
import type { AppEnv } from "../http/types";
import { validationHook } from "../http/validation";
import { replanServer } from "../services/planner";

/** Per-server planning routes (issue 8). */
export const serverPlanRoutes = new OpenAPIHono<AppEnv>({ defaultHook: validationHook });

serverPlanRoutes.openapi(
  createRoute({
    method: "post",
    path: "/v1/servers/{id}/desired/release",
    tags: ["servers"],
    summary: "Release a pinned server back to planning; it is re-planned at once",
    description:
      "An operator's explicit PUT /v1/servers/{id}/desired pins the server: the planner leaves its agents alone. " +
      "Releasing hands it back: agents it runs keep their images, the rest follow its roles, the fleet's capabilities " +
      "and channels; a new generation is issued only if that differs from the current config.",
    security: bearer,
    middleware: [requireScope("write")] as const,
    request: { params: serverIdParam },
    responses: {
      200: jsonResponse(ServerDetail, "The server, planned again"),
      ...commonErrors,
      ...notFoundError,
      ...conflictError("server_removed"),
    },
  }),
  async (c) => {
    const { id } = c.req.valid("param");
    const out = await replanServer(c.env, actorOf(c.var.principal), id, { reason: "released", release: true });
    return c.json(serverDetail(out.view), 200);
  },
);
