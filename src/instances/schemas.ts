import { z } from "@hono/zod-openapi";
import { agentState, agentStatus } from "../model/server/schemas";

export const Instance = z
  .object({
    server_id: z.string(),
    hostname: z
      .string()
      .nullable()
      .openapi({ description: "the server's hostname (null only while its index row is missing)" }),
    fleet: z.string(),
    agent: z.string(),
    instance_id: z.string().nullable(),
    desired: z.object({ image: z.string(), version: z.string().nullable() }).nullable(),
    reported: z.object({ image: z.string(), version: z.string().nullable(), state: agentState.nullable() }).nullable(),
    status: agentStatus,
  })
  .openapi("AgentInstance");
