import { createRoute, OpenAPIHono, z } from "@hono/zod-openapi";
import { requireScope } from "../auth/principal";
import { fleetId } from "../model/fleet";
import { bearer, commonErrors, jsonResponse, notFoundError } from "../http/openapi";
import type { AppEnv } from "../http/types";
import { validationHook } from "../http/validation";
import { cursorParam, decodeCursor, encodeCursor, decimalParam } from "../http/paging";
import { FleetHealth, StatusSchema } from "./schemas";
import { visibleFleets } from "../domain/principal";
import { FLEET_HEALTH_PAGE, fleetsHealth, statusOf } from "./service";

/** GET /v1/status: `hm status` in one request; GET /v1/status/fleets: `hm fleets` (./service.ts). */
export const statusRoutes = new OpenAPIHono<AppEnv>({ defaultHook: validationHook })
  .openapi(
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
          attention: decimalParam(0, 200)
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
  )
  .openapi(
    createRoute({
      method: "get",
      path: "/fleets",
      operationId: "listFleetsHealth",
      tags: ["fleets"],
      summary:
        "A page of fleets, each with its settings and health: servers by status, those that need a look, rollouts",
      description:
        "The fleets list (same order and cursor) with each fleet's servers counted on the server, so one request " +
        `shows every fleet of the page. At most ${FLEET_HEALTH_PAGE} fleets a page: each costs a D1 batch and a coordinator call.`,
      security: bearer,
      middleware: [requireScope("read")] as const,
      request: {
        query: z.object({
          limit: decimalParam(1, FLEET_HEALTH_PAGE).default(FLEET_HEALTH_PAGE),
          cursor: cursorParam,
        }),
      },
      responses: {
        200: jsonResponse(
          z.object({ items: z.array(FleetHealth), next_cursor: z.string().nullable() }),
          "A page of fleets with their health",
        ),
        ...commonErrors,
      },
    }),
    async (c) => {
      const { limit, cursor } = c.req.valid("query");
      const after = decodeCursor(cursor, 1)?.[0] ?? null;
      const { items, more } = await fleetsHealth(c.env, visibleFleets(c.var.principal), after, limit);
      const last = items.at(-1);
      return c.json({ items, next_cursor: more && last ? encodeCursor([last.id]) : null }, 200);
    },
  );
