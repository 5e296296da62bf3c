import { createRoute, OpenAPIHono, z } from "@hono/zod-openapi";
import { requireScope } from "../auth/principal";
import { fleetId } from "../fleets/schemas";
import { bearer, commonErrors, jsonResponse, notFoundError } from "../http/openapi";
import type { AppEnv } from "../http/types";
import { validationHook } from "../http/validation";
import { StatusSchema } from "./schemas";
import { visibleFleets } from "../domain/principal";
import { statusOf } from "./service";

/** GET /v1/status: `hm status` in one request (./service.ts). */
export const statusRoutes = new OpenAPIHono<AppEnv>({ defaultHook: validationHook }).openapi(
  createRoute({
    method: "get",
    path: "/",
    operationId: "getStatus",
    tags: ["servers"],
    summary:
      "One screen: per fleet, servers counted by status and state, those that need a look, reboot groups, rollouts in progress; the data version",
    description:
      "Counted on the server, in one request whatever the fleet's size. `attention` caps the servers listed per " +
      "status (failed, stale, drifted); each list comes with its full `count`, so a client can say how many more " +
      "there are. Without `fleet`, the first 50 fleets (`more_fleets` says whether there are others).",
    security: bearer,
    middleware: [requireScope("read")] as const,
    request: {
      query: z.object({
        fleet: fleetId.optional(),
        attention: z.coerce
          .number()
          .int()
          .min(0)
          .max(200)
          .default(20)
          .openapi({ description: "servers listed per status that needs a look" }),
      }),
    },
    responses: { 200: jsonResponse(StatusSchema, "The status"), ...commonErrors, ...notFoundError },
  }),
  async (c) => {
    const q = c.req.valid("query");
    return c.json(await statusOf(c.env, { ...q, visible: visibleFleets(c.var.principal) }), 200);
  },
);
