import { createRoute, OpenAPIHono, z } from "@hono/zod-openapi";
import { decimalParam } from "../http/paging";
import { requireServer, serverPrincipal } from "../auth/principal";
import { bearer, commonErrors, conflictError, jsonBody, jsonResponse, preconditionError } from "../http/openapi";
import type { AppEnv } from "../http/types";
import { validationHook } from "../http/validation";
import { MAX_WAIT_S } from "../domain/limits";
import { HostDesiredConfig, InventoryReport, ReportAccepted } from "../model/server/schemas";
import { heldGeneration, matchesGeneration, parseIfNoneMatch } from "../http/conditional";
import { iso } from "../lib/time";
import { channelRoutes } from "./channel";
import { desiredForHost, reportFromHost } from "./service";

const generationTag = z.object({
  ETag: z.string().openapi({ description: "The desired generation, as an entity tag", example: '"7"' }),
  "X-Report-Tag": z
    .string()
    .optional()
    .openapi({ description: "The request's X-Report-Tag, said back: the poll counted as the host's heartbeat" }),
});

// One chain, so the type of agentRoutes (and of the app that mounts it at /v1/agent) carries every route for hc.
export const agentRoutes = new OpenAPIHono<AppEnv>({ defaultHook: validationHook })
  .openapi(
    createRoute({
      method: "get",
      path: "/desired",
      operationId: "getAgentDesired",
      tags: ["host agents"],
      summary: "The calling server's desired config; 304 when the If-None-Match generation is current",
      description:
        "The ETag carries the generation. With `wait`, a request whose If-None-Match is current parks " +
        "until the generation changes or `wait` seconds pass (at most 60), then answers 200 or 304. " +
        "With X-Report-Tag (the `report_tag` of the host's last accepted report), the poll is also the host's " +
        "heartbeat: it says the host reconciled and its report is unchanged, and counts as that report received " +
        "now, so a steady host needs one request a minute. 412 `report_tag_unknown` when the tag is not the " +
        "server's stored report: report in full, then poll again.",
      security: bearer,
      middleware: [requireServer] as const,
      request: {
        query: z.object({ wait: decimalParam(0, MAX_WAIT_S).default(0) }),
        headers: z.object({
          "if-none-match": z.string().optional(),
          "x-report-tag": z
            .string()
            .regex(/^[0-9a-z]{1,32}$/)
            .optional()
            .openapi({ description: "The report_tag of the host's last accepted report: this poll is its heartbeat" }),
        }),
      },
      responses: {
        200: {
          ...jsonResponse(HostDesiredConfig, "The desired config"),
          headers: generationTag,
        },
        304: { description: "Unchanged since the generation in If-None-Match", headers: generationTag },
        ...preconditionError("X-Report-Tag does not name the server's stored report (`report_tag_unknown`)"),
        ...commonErrors,
      },
    }),
    async (c) => {
      const { wait } = c.req.valid("query");
      const p = serverPrincipal(c.get("principal"));
      const condition = parseIfNoneMatch(c.req.header("If-None-Match"));
      const reportTag = c.req.valid("header")["x-report-tag"];
      const result = await desiredForHost(
        c.env,
        p,
        heldGeneration(condition),
        wait * 1000,
        c.req.raw.signal,
        reportTag,
      );
      c.header("ETag", `"${result.generation}"`);
      c.header("Cache-Control", "no-store");
      // Said back when the poll counted as the heartbeat: a host whose header a proxy dropped knows to report instead.
      if (reportTag !== undefined) c.header("X-Report-Tag", reportTag);
      if (result.notModified) return c.body(null, 304);
      if (result.refresh)
        return c.json({ ...result.config, refresh: { requested_at: iso(result.refresh.requested_at) } }, 200);
      // `*` or a list naming the current generation is a match too (RFC 9110), not only the newest tag.
      if (matchesGeneration(condition, result.generation)) return c.body(null, 304);
      return c.json(result.config, 200);
    },
  )

  .openapi(
    createRoute({
      method: "put",
      path: "/inventory",
      operationId: "putAgentInventory",
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
      // c.get, not c.var: hono builds c.var as a new object from its map on every read.
      const p = serverPrincipal(c.get("principal"));
      // The ledger's ReportAccepted, already JSON: sent as it came, typed as what c.json would send.
      const accepted = await reportFromHost(c.env, p, report);
      return c.body(accepted, 200, { "Content-Type": "application/json" }) as unknown as ReturnType<
        typeof c.json<ReportAccepted, 200>
      >;
    },
  )

  .route("/", channelRoutes);
