import { createRoute, OpenAPIHono, z } from "@hono/zod-openapi";
import { requireScope } from "../auth/principal";
import { visibleFleets } from "../domain/principal";
import { bearer, commonErrors, serverNameErrors, jsonResponse } from "../http/openapi";
import { cursorParam, decodeCursor, limitParam, page } from "../http/paging";
import type { AppEnv } from "../http/types";
import { validationHook } from "../http/validation";
import { agentName, imageRef } from "../model/server/schemas";
import { labelQuery } from "../model/server/labels";
import { serverRef } from "../servers/schemas";
import { resolveServer } from "../servers/service";
import { searchInstances } from "./service";
import { Instance } from "./schemas";

// One chain, so the type of instanceRoutes (and of the app that mounts it at /v1/instances) carries every route for hc.
export const instanceRoutes = new OpenAPIHono<AppEnv>({ defaultHook: validationHook }).openapi(
  createRoute({
    method: "get",
    path: "/",
    operationId: "listInstances",
    tags: ["instances"],
    summary:
      "Agent instances (one per server and agent, in hostname order), searchable by server (id, hostname or fleet/hostname), agent, image and the server's labels",
    security: bearer,
    middleware: [requireScope("read")] as const,
    request: {
      query: z.object({
        server: serverRef.optional(),
        agent: agentName.optional(),
        image: imageRef.optional().openapi({ description: "Matches the desired or the reported image" }),
        label: labelQuery,
        limit: limitParam,
        cursor: cursorParam,
      }),
    },
    responses: {
      200: jsonResponse(z.object({ items: z.array(Instance), next_cursor: z.string().nullable() }), "A page"),
      ...commonErrors,
      ...serverNameErrors,
    },
  }),
  async (c) => {
    const q = c.req.valid("query");
    const after = decodeCursor(q.cursor, 3);
    const server = q.server === undefined ? undefined : await resolveServer(c.env, c.var.principal, q.server);
    const rows = await searchInstances(
      c.env,
      { ...q, server, labels: q.label, visible: visibleFleets(c.var.principal) },
      after ? [after[0], after[1], after[2]] : null,
      q.limit,
    );
    const { items, next_cursor } = page(rows, q.limit, (r) => [r.hostname, r.serverId, r.agent]);
    return c.json(
      {
        items: items.map((r) => ({
          server_id: r.serverId,
          hostname: r.hostname,
          fleet: r.fleetId,
          agent: r.agent,
          instance_id: r.instanceId,
          desired: r.desiredImage ? { image: r.desiredImage, version: r.desiredVersion } : null,
          reported: r.reportedImage
            ? { image: r.reportedImage, version: r.reportedVersion, state: r.reportedState }
            : null,
          status: r.status,
        })),
        next_cursor,
      },
      200,
    );
  },
);
