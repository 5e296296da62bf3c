import { z } from "@hono/zod-openapi";
import { OPERATOR_SCOPES, TOKEN_KINDS, TOKEN_SCOPES } from "../domain/enums";

export const TokenInput = z
  .strictObject({ name: z.string().min(1).max(200), scope: z.enum(OPERATOR_SCOPES) })
  .openapi("TokenInput");

export const Token = z
  .object({
    id: z.string(),
    kind: z.enum(TOKEN_KINDS),
    scope: z.enum(TOKEN_SCOPES),
    server_id: z.string().nullable(),
    name: z.string(),
    created_by: z.string(),
    created_at: z.string(),
    revoked_at: z.string().nullable(),
  })
  .openapi("Token");
