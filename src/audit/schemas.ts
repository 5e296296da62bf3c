import { z } from "@hono/zod-openapi";

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
