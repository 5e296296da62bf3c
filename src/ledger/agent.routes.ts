import { createRoute, OpenAPIHono, z } from "@hono/zod-openapi";
import { requireServer, serverPrincipal } from "../auth/principal";
import { bearer, commonErrors, conflictError, jsonBody, jsonResponse } from "../http/openapi";
import type { AppEnv } from "../http/types";
import { validationHook } from "../http/validation";
import { MAX_WAIT_S } from "../domain/limits";
import { AgentStatusRow, DesiredConfig, InventoryReport, serverStatus } from "./schemas";
import { unwrap } from "../http/errors";
import { ledgerOf } from "./stub";
import { iso } from "../lib/time";



/** The generation a host already holds, from `If-None-Match: "7"` (weak tags and lists too). */
export function knownGeneration(header: string | undefined): number | null {
  if (!header) return null;
  for (const tag of header.split(",")) {
    const m = /^\s*(?:W\/)?"(\d{1,15})"\s*$/.exec(tag);
    if (m) return Number(m[1]);
  }
  return null;
}

const ReportAccepted = z
  .object({
    server_id: z.string(),
    desired_generation: z.number().int(),
    status: serverStatus,
    agents: z.array(AgentStatusRow),
  })
  .openapi("ReportAccepted");

// One chain, so the type of agentRoutes (and of the app that mounts it at /v1/agent) carries every route for hc.
export const agentRoutes = new OpenAPIHono<AppEnv>({ defaultHook: validationHook })
.openapi(
  createRoute({
    method: "get",
    path: "/desired",
    tags: ["host agents"],
    summary: "The calling server's desired config; 304 when the If-None-Match generation is current",
    description:
      "The ETag carries the generation. With `wait`, a request whose If-None-Match is current parks " +
      "until the generation changes or `wait` seconds pass (at most 60), then answers 200 or 304.",
    security: bearer,
    middleware: [requireServer] as const,
    request: {
      query: z.object({ wait: z.coerce.number().int().min(0).max(MAX_WAIT_S).default(0) }),
      headers: z.object({ "if-none-match": z.string().optional() }),
    },
    responses: {
      200: jsonResponse(
        DesiredConfig.extend({
          refresh: z
            .object({ requested_at: z.string() })
            .optional()
            .openapi({ description: "present while an operator's refresh is pending: report again now" }),
        }),
        "The desired config",
      ),
      304: { description: "Unchanged since the generation in If-None-Match" },
      ...commonErrors,
    },
  }),
  async (c) => {
    const { wait } = c.req.valid("query");
    const p = serverPrincipal(c.var.principal);
    const known = knownGeneration(c.req.header("If-None-Match"));
    const result = unwrap(await ledgerOf(c.env, p.serverId).agentDesired(p.tokenHash, known, wait * 1000));
    c.header("ETag", `"${result.generation}"`);
    c.header("Cache-Control", "no-store");
    if (result.notModified) return c.body(null, 304);
    if (result.refresh) return c.json({ ...result.config, refresh: { requested_at: iso(result.refresh.requested_at) } }, 200);
    return c.json(result.config, 200);
  },
)

.openapi(
  createRoute({
    method: "put",
    path: "/inventory",
    tags: ["host agents"],
    summary: "Report what the calling server really runs, failures included",
    security: bearer,
    middleware: [requireServer] as const,
    request: { body: jsonBody(InventoryReport) },
    responses: {
      200: jsonResponse(ReportAccepted, "Stored; the status computed from it"),
      ...commonErrors,
      ...conflictError("The report claims a generation that was never issued"),
    },
  }),
  async (c) => {
    const report = c.req.valid("json");
    const p = serverPrincipal(c.var.principal);
    const result = unwrap(await ledgerOf(c.env, p.serverId).agentReport(p.tokenHash, report));
    return c.json(
      {
        server_id: p.serverId,
        desired_generation: result.generation,
        status: result.computed.status,
        agents: result.computed.agents,
      },
      200,
    );
  },
);
