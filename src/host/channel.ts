/**
 * GET /v1/agent/channel: the host channel, a WebSocket (docs/host-agents.md; its messages:
 * channel.schema.json). The Worker checks the token's form and hashes it, then hands the upgrade
 * to the server's ledger, which checks the digest and accepts the socket as hibernatable: the
 * ledger sleeps between messages, and the Worker is out of the path once the socket is open.
 */
import { createRoute, OpenAPIHono, z } from "@hono/zod-openapi";
import { decimalParam } from "../http/paging";
import { requireServer, serverPrincipal } from "../auth/principal";
import { DomainError } from "../domain/errors";
import { bearer, commonErrors, ErrorSchema } from "../http/openapi";
import type { AppEnv } from "../http/types";
import { validationHook } from "../http/validation";
import { CHANNEL_PROTOCOL, TOKEN_PROTOCOL_PREFIX } from "../model/server/channel-messages";
import { openChannel } from "./service";

export const channelRoutes = new OpenAPIHono<AppEnv>({ defaultHook: validationHook }).openapi(
  createRoute({
    method: "get",
    path: "/channel",
    operationId: "openAgentChannel",
    tags: ["host agents"],
    summary: "The host channel: a WebSocket over which the desired config is pushed and reports are acknowledged",
    description:
      "A WebSocket upgrade (`Upgrade: websocket`) with the server's token: `Authorization: Bearer hms.…`, or, for " +
      `clients that cannot set headers, \`Sec-WebSocket-Protocol: ${CHANNEL_PROTOCOL}, ${TOKEN_PROTOCOL_PREFIX}<token>\` ` +
      `(the server selects \`${CHANNEL_PROTOCOL}\`; never put the token in the URL). \`generation\`: the one the host holds, ` +
      "so the server sends `desired` only when it is not current. Messages are JSON text frames, documented in " +
      "`channel.schema.json`; keep-alive: send the text `ping`, the server answers `pong`. One socket per server: a " +
      "newer one closes the older (4001); a revoked or rotated token closes it (4401), so does a finished " +
      "decommission (4410); flooding closes it with 1008.",
    security: bearer,
    middleware: [requireServer] as const,
    request: {
      query: z.object({
        generation: decimalParam(0, Number.MAX_SAFE_INTEGER)
          .optional()
          .openapi({ description: "The desired generation the host holds" }),
      }),
    },
    responses: {
      101: { description: "Switching Protocols: the channel is open" },
      426: {
        description: "Not a WebSocket upgrade (`upgrade_required`)",
        content: { "application/json": { schema: ErrorSchema } },
      },
      ...commonErrors,
    },
  }),
  async (c) => {
    if (c.req.header("Upgrade")?.toLowerCase() !== "websocket") {
      throw new DomainError("upgrade_required", "GET /v1/agent/channel is a WebSocket: send Upgrade: websocket");
    }
    const { generation } = c.req.valid("query");
    const offered = (c.req.header("Sec-WebSocket-Protocol") ?? "")
      .split(",")
      .map((p) => p.trim())
      .filter((p) => p && !p.startsWith(TOKEN_PROTOCOL_PREFIX));
    return openChannel(c.env, serverPrincipal(c.var.principal), generation ?? null, offered);
  },
);
