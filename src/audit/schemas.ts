import { z } from "@hono/zod-openapi";
import { decimalParam } from "../http/paging";
import { MAX_CURSOR_LENGTH } from "../domain/limits";

/** Rows per export answer: a page stays a few MB, so a huge log never holds one request long. */
const MAX_EXPORT_PAGE = 5000;

export const AuditEntry = z
  .object({
    id: z.number().int(),
    at: z.string(),
    actor: z.string(),
    actor_name: z
      .string()
      .nullable()
      .openapi({ description: "for an operator token (`token:<id>`), its name; ADMIN_TOKEN for the bootstrap token" }),
    action: z.string(),
    target: z.string(),
    hostname: z.string().nullable().openapi({ description: "for a server target, its hostname" }),
    details: z.unknown(),
  })
  .openapi("AuditEntry");

export const ndjson = z.string().openapi({ example: '{"id":1,"at":"2026-11-25T10:00:00.000Z","actor":"token:…"}\n' });

const ISO_TIME = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}(:\d{2}(\.\d{1,3})?)?(Z|[+-]\d{2}:\d{2})$/;

export const ExportQuery = z.object({
  since: z
    .string()
    .max(40)
    .regex(ISO_TIME, "an ISO 8601 time with a zone, e.g. 2026-11-25T00:00:00Z")
    .refine((v) => Number.isFinite(Date.parse(v)), { message: "not a real time" })
    .optional()
    .openapi({ description: "Without a cursor: start at the first row dated at or after this time" }),
  cursor: z.string().max(MAX_CURSOR_LENGTH).optional().openapi({ description: "X-Next-Cursor of the previous page" }),
  limit: decimalParam(1, MAX_EXPORT_PAGE).default(1000),
});

export const AuditDay = z
  .object({
    day: z.string(),
    sha256: z.string(),
    prev_sha256: z.string().nullable(),
    after_id: z.number().int(),
    last_id: z.number().int(),
    rows: z.number().int(),
  })
  .openapi("AuditDay");
