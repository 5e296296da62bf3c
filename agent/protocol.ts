/**
 * What the agent accepts from the control plane: the desired config (GET /v1/agent/desired, and
 * the channel's `desired` and `lifecycle` messages), the channel's other messages and a report's
 * acknowledgement, each checked before the loop acts on it. A server that lies (a proxy's error
 * page, a truncated or malformed body, an agent named `__proto__`) is refused like a failed call:
 * the loop keeps what it had, says why, and retries with backoff; it never acts on half a config.
 * Unknown fields are kept (a newer server's additions); the server's own schemas live in
 * src/model/server/, which the agent cannot load as it runs (Node strips types, not paths).
 */
import { z } from "zod";
import type { ServerMessage } from "../src/model/server/channel-messages.ts";
import type { DesiredConfig } from "../src/model/server/schemas.ts";
import { CHANNEL_VERSION } from "../src/domain/channel.ts";

/** The largest desired config (or channel message) read, whatever its number of agents. */
export const MAX_DESIRED_BYTES = 8 * 1024 * 1024;

/**
 * The most agents this agent takes in one desired config: its own bound, ten times what a server
 * may be given today (src/domain/limits.ts), and deliberately not that constant. The agent's own
 * update arrives in a desired config: were it held to the server's limit as compiled in, a server
 * that raised its limit would have every older agent refuse every config, its update included,
 * for good. The byte cap above already bounds the work; this keeps a config of thousands of
 * agents (one engine command after another) from being taken for one.
 */
export const MAX_DESIRED_AGENTS = 5_000;

/** The protocol's agent names (src/model/server/schemas.ts): `__proto__` and the like are not. */
const agentName = z.string().regex(/^[a-z0-9][a-z0-9._-]{0,62}$/, "not an agent name");

const AgentSpec = z.looseObject({
  name: agentName,
  image: z.string().min(1),
  version: z.string().min(1),
  instance_id: z.string().min(1),
});

const Desired = z.looseObject({
  server_id: z.string(),
  generation: z.number().int().min(0).max(Number.MAX_SAFE_INTEGER),
  lifecycle: z.enum(["run", "terminate", "uninstall"]),
  agents: z
    .array(AgentSpec)
    .max(MAX_DESIRED_AGENTS, `more than ${MAX_DESIRED_AGENTS} agents, this agent's limit`)
    .superRefine((agents, ctx) => {
      const seen = new Set<string>();
      for (const a of agents) {
        if (seen.has(a.name)) ctx.addIssue({ code: "custom", message: `agent ${a.name} is named twice` });
        seen.add(a.name);
      }
    }),
});

const Accepted = z.looseObject({
  server_id: z.string(),
  desired_generation: z.number().int(),
  status: z.string(),
  agents: z.array(z.unknown()),
  report_tag: z.string().optional(),
});

const v = z.literal(CHANNEL_VERSION);
const Problem = z.looseObject({ code: z.string(), message: z.string() });

const Message = z.discriminatedUnion("type", [
  z.looseObject({ type: z.literal("desired"), v, config: Desired }),
  z.looseObject({ type: z.literal("lifecycle"), v, config: Desired }),
  z.looseObject({ type: z.literal("refresh"), v }),
  z.looseObject({
    type: z.literal("ack"),
    v,
    id: z.string(),
    status: z.number().int(),
    body: Accepted.optional(),
    error: Problem.optional(),
  }),
  z.looseObject({ type: z.literal("error"), v, error: Problem }),
]);
const KNOWN_TYPES: readonly string[] = ["desired", "lifecycle", "refresh", "ack", "error"];

/** Thrown for what the server sent that the protocol does not allow. */
export class ProtocolError extends Error {
  override name = "ProtocolError";
}

const problems = (error: z.ZodError) =>
  error.issues
    .slice(0, 5)
    .map((i) => `${i.path.join(".") || "(top)"}: ${i.message}`)
    .join("; ");

function checked<T>(schema: z.ZodType, value: unknown, what: string): T {
  const r = schema.safeParse(value);
  if (!r.success) throw new ProtocolError(`${what} is not valid: ${problems(r.error)}`);
  return r.data as T;
}

export const parseDesired = (value: unknown) => checked<DesiredConfig>(Desired, value, "the desired config");

/** The refusal of a desired config that names another server than this host's, or null. */
export function foreignConfig(serverId: string | undefined, config: DesiredConfig): ProtocolError | null {
  if (serverId === undefined || config.server_id === serverId) return null;
  return new ProtocolError(
    `the desired config is server ${JSON.stringify(config.server_id.slice(0, 100))}'s, not this host's (${serverId}); it was not acted on (a cache between the host and Harbormaster?)`,
  );
}

export const parseAccepted = <T>(value: unknown) => checked<T>(Accepted, value, "the report's answer");

/**
 * A channel frame as a message: null for a type this agent does not know (a newer server's, left
 * alone); throws ProtocolError for one that is not JSON, too large, or a known type malformed.
 */
export function parseServerMessage(data: string): ServerMessage | null {
  if (data.length > MAX_DESIRED_BYTES)
    throw new ProtocolError(`a channel message of ${data.length} characters is too large`);
  let json: unknown;
  try {
    json = JSON.parse(data);
  } catch {
    throw new ProtocolError(`a channel message is not JSON: ${JSON.stringify(data.slice(0, 80))}`);
  }
  const type = (json as { type?: unknown } | null)?.type;
  if (typeof type === "string" && !KNOWN_TYPES.includes(type)) return null;
  return checked<ServerMessage>(Message, json, `a channel message (${typeof type === "string" ? type : "no type"})`);
}

/**
 * A response's body as text, at most `max` bytes: a larger one is cancelled, not held in memory.
 */
async function readCapped(res: Response, max: number, what: string): Promise<string> {
  const declared = Number(res.headers.get("Content-Length") ?? NaN);
  const tooLarge = () => new ProtocolError(`${what} is larger than ${max} bytes; it was not read`);
  if (declared > max) {
    await res.body?.cancel();
    throw tooLarge();
  }
  if (!res.body) return "";
  const decoder = new TextDecoder();
  let text = "";
  let size = 0;
  const reader = res.body.getReader();
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    size += value.length;
    if (size > max) {
      await reader.cancel();
      throw tooLarge();
    }
    text += decoder.decode(value, { stream: true });
  }
  return text + decoder.decode();
}

/** A response's JSON body, capped; a body that is not JSON throws ProtocolError. */
export async function readJson(res: Response, max: number, what: string): Promise<unknown> {
  const text = await readCapped(res, max, what);
  try {
    return JSON.parse(text);
  } catch {
    throw new ProtocolError(`${what} is not JSON: ${JSON.stringify(text.slice(0, 80))}`);
  }
}
