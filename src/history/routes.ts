import { createRoute, OpenAPIHono, z } from "@hono/zod-openapi";
import { accepts } from "hono/accepts";
import { requireScope } from "../auth/principal";
import { fleetParam } from "../fleets/schemas";
import { bearer, commonErrors, notFoundError } from "../http/openapi";
import type { AppEnv } from "../http/types";
import { validationHook } from "../http/validation";
import { FleetHistory, HistoryQuery } from "./schemas";
import { fleetHistory } from "./service";
import { historyCsv } from "./shape";

// One chain, so the type of this router (and of the app that mounts it at /v1/fleets) carries its route for hc.
export const historyRoutes = new OpenAPIHono<AppEnv>({ defaultHook: validationHook }).openapi(
  createRoute({
    method: "get",
    path: "/{fleet}/history",
    operationId: "getFleetHistory",
    tags: ["fleets"],
    summary: "The fleet over time: servers by status, each agent's versions, reboots and rollouts per day",
    description:
      "From the cron's rollup: a row per fleet every 5 minutes only when a figure changed, kept 30 days. " +
      "Series are steps: a figure holds until the next point. As CSV (`at,metric,agent,series,value`) " +
      "with `Accept: text/csv` or `?format=csv`.",
    security: bearer,
    middleware: [requireScope("read")] as const,
    request: { params: fleetParam, query: HistoryQuery },
    responses: {
      200: {
        description: "The fleet's history",
        content: {
          "application/json": { schema: FleetHistory },
          "text/csv": { schema: z.string().openapi({ example: "at,metric,agent,series,value\r\n" }) },
        },
      },
      ...commonErrors,
      ...notFoundError,
    },
  }),
  async (c) => {
    const { fleet } = c.req.valid("param");
    const q = c.req.valid("query");
    const h = await fleetHistory(c.env, fleet, q);
    const csv =
      q.format === "csv" ||
      (q.format === undefined &&
        accepts(c, { header: "Accept", supports: ["application/json", "text/csv"], default: "application/json" }) ===
          "text/csv");
    if (csv)
      return c.body(historyCsv(h), 200, {
        "Content-Type": "text/csv; charset=utf-8",
        "Content-Disposition": `attachment; filename="history-${fleet}.csv"`,
      });
    return c.json(h, 200);
  },
);
