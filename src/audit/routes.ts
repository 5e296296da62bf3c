import { createRoute, OpenAPIHono, z } from "@hono/zod-openapi";
import { requireAllFleets, requireScope } from "../auth/principal";
import { DomainError } from "../domain/errors";
import { bearer, commonErrors, serverNameErrors, jsonResponse, notFoundError } from "../http/openapi";
import { cursorParam, decodeIdCursor, encodeCursor, limitParam, page, decimalParam } from "../http/paging";
import type { AppEnv } from "../http/types";
import { validationHook } from "../http/validation";
import { dayName, parseDay } from "./archive";
import { listDays, readDay } from "./archive.service";
import { exportPage, searchAudit } from "./service";
import { AuditDay, AuditEntry, ExportQuery, ndjson } from "./schemas";

// One chain, so the type of auditRoutes (and of the app that mounts it at /v1/audit) carries every route for hc.
export const auditRoutes = new OpenAPIHono<AppEnv>({ defaultHook: validationHook })
  .openapi(
    createRoute({
      method: "get",
      path: "/",
      operationId: "listAudit",
      tags: ["audit"],
      summary: "The audit log, newest first",
      security: bearer,
      middleware: [requireScope("read")] as const,
      request: {
        query: z.object({
          target: z.string().max(330).optional().openapi({
            description:
              "e.g. `fleet:prod`, `rollout:<id>`, `server:<id>`, `server:<hostname>` or `server:<fleet>/<hostname>`",
          }),
          limit: limitParam,
          cursor: cursorParam,
        }),
      },
      responses: {
        200: jsonResponse(z.object({ items: z.array(AuditEntry), next_cursor: z.string().nullable() }), "A page"),
        ...commonErrors,
        ...serverNameErrors,
      },
    }),
    async (c) => {
      const q = c.req.valid("query");
      const before = decodeIdCursor(q.cursor) ?? undefined;
      const rows = await searchAudit(c.env, c.var.principal, { target: q.target, before, limit: q.limit });
      const { items, next_cursor } = page(rows, q.limit, (r) => [String(r.id)]);
      return c.json(
        {
          items,
          next_cursor,
        },
        200,
      );
    },
  )
  .openapi(
    createRoute({
      method: "get",
      path: "/export",
      operationId: "exportAudit",
      tags: ["audit"],
      summary: "The audit log as NDJSON, oldest first, a page at a time",
      description:
        "One audit row per line, in id order (ids grow in the order rows are written, equal times included). " +
        "The answer holds up to `limit` rows; `X-Next-Cursor` resumes right after the last one (or where the " +
        "page started, when it held none) and `X-More` says whether more rows are there now. A client that " +
        "resumes with the cursor gets every row once, rows written meanwhile too. A token limited to fleets " +
        "exports only its fleets' rows.",
      security: bearer,
      middleware: [requireScope("read")] as const,
      request: { query: ExportQuery },
      responses: {
        200: {
          description: "A page of rows",
          headers: z.object({
            "X-Next-Cursor": z.string().openapi({ description: "Pass as `cursor` to read on" }),
            "X-More": z.enum(["true", "false"]),
          }),
          content: { "application/x-ndjson": { schema: ndjson } },
        },
        ...commonErrors,
      },
    }),
    async (c) => {
      const q = c.req.valid("query");
      const after = decodeIdCursor(q.cursor);
      const since = q.since === undefined ? undefined : Date.parse(q.since);
      const p = await exportPage(c.env, c.var.principal, { after, since, limit: q.limit });
      // zod-openapi's types read `application/x-ndjson` as a JSON variant it cannot type (never).
      return c.body(p.lines.map((l) => JSON.stringify(l) + "\n").join(""), 200, {
        "Content-Type": "application/x-ndjson; charset=utf-8",
        "X-Next-Cursor": encodeCursor([String(p.last)]),
        "X-More": String(p.more),
        "Cache-Control": "no-store",
      }) as never;
    },
  )
  .openapi(
    createRoute({
      method: "get",
      path: "/days",
      operationId: "listAuditDays",
      tags: ["audit"],
      summary: "The audit day files in R2, oldest first",
      description:
        "One immutable file per UTC day, cut by the cron once the day is over; each records the sha256 of the " +
        "previous day's file. They hold every fleet's rows, so they take a token of every fleet.",
      security: bearer,
      middleware: [requireScope("read"), requireAllFleets] as const,
      request: {
        query: z.object({
          from: z.string().max(10).optional().openapi({ description: "the first day (YYYY-MM-DD)" }),
          limit: decimalParam(1, 1000).default(1000),
        }),
      },
      responses: {
        200: jsonResponse(
          z.object({ items: z.array(AuditDay), next_from: z.string().nullable() }),
          "Days, oldest first",
        ),
        ...commonErrors,
      },
    }),
    async (c) => {
      const q = c.req.valid("query");
      const from = q.from === undefined ? undefined : parseDay(q.from);
      if (from === null) throw new DomainError("invalid_query", "from is a day: YYYY-MM-DD");
      return c.json(await listDays(c.env, { from, limit: q.limit }), 200);
    },
  )
  .openapi(
    createRoute({
      method: "get",
      path: "/days/{day}",
      operationId: "getAuditDay",
      tags: ["audit"],
      summary: "One audit day file, as written",
      description:
        "Its first line is the header (day, previous day's sha256, id range, row count), then one row per line.",
      security: bearer,
      middleware: [requireScope("read"), requireAllFleets] as const,
      request: { params: z.object({ day: z.string().max(10).openapi({ example: "2026-11-25" }) }) },
      responses: {
        200: {
          description: "The file",
          headers: z.object({
            "X-Checksum-Sha256": z.string().openapi({ description: "sha256 (hex) recorded when it was cut" }),
          }),
          content: { "application/x-ndjson": { schema: ndjson } },
        },
        ...commonErrors,
        ...notFoundError,
      },
    }),
    async (c) => {
      const { day } = c.req.valid("param");
      const start = parseDay(day);
      if (start === null) throw new DomainError("invalid_param", "day is YYYY-MM-DD");
      const object = await readDay(c.env, start);
      if (!object) throw new DomainError("not_found", `no audit file for ${dayName(start)} (not cut yet, or missing)`);
      // (as for the export: the NDJSON media type has no typed response in zod-openapi)
      return c.body(object.body, 200, {
        "Content-Type": "application/x-ndjson; charset=utf-8",
        "X-Checksum-Sha256": object.customMetadata?.sha256 ?? "",
        "Cache-Control": "no-store",
      }) as never;
    },
  );
