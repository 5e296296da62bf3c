/** @jsxImportSource hono/jsx */
/**
 * The audit log as people read it, shared by the audit page and a server's trail: actors by name
 * (a token's name, a server's hostname) and details as labelled text instead of JSON.
 */
import type { z } from "zod";
import type { AuditEntry } from "../audit/schemas";
import type { Token } from "../auth/schemas";
import type { ServerDetail } from "../servers/schemas";
import { qs } from "./api";
import type { View } from "./context";
import { BOOTSTRAP_ID } from "../domain/principal";
import { serverHref } from "./ui";

export type Entry = z.output<typeof AuditEntry>;

/** Who did it, by name: token and server ids mapped to names (`names`), else the id as a fallback. */
export interface Names {
  tokens: Map<string, string>;
  servers: Map<string, { hostname: string; fleet?: string }>;
}

/** An actor as a person reads it: a token's name, a server's hostname, the deployment's admin token. */
export function actorText(actor: string, names: Names) {
  const [kind, id] = [actor.slice(0, actor.indexOf(":")), actor.slice(actor.indexOf(":") + 1)];
  if (kind === "token") {
    if (id === BOOTSTRAP_ID) return <span title={actor}>the admin token (ADMIN_TOKEN)</span>;
    const name = names.tokens.get(id);
    return name ? (
      <span title={actor}>
        token <strong>{name}</strong>
      </span>
    ) : (
      <span title={`${actor} (token names need an admin session)`}>
        token <span class="mono">{id.slice(0, 8)}</span>
      </span>
    );
  }
  if (kind === "server") {
    const s = names.servers.get(id);
    return s ? (
      <span title={actor}>
        server <a href={serverHref({ id, ...s })}>{s.hostname}</a>
      </span>
    ) : (
      <span title={actor}>
        server <a href={`/console/servers/${id}`}>{id.slice(0, 8)}</a>
      </span>
    );
  }
  if (kind === "rollout" && id)
    return (
      <span title={actor}>
        rollout <a href={`/console/rollouts/${encodeURIComponent(id)}`}>{id.slice(0, 8)}</a>
      </span>
    );
  return <span class="mono">{actor}</span>;
}

/** An actor the API already named (a rollout's `created_by_name`), as a person reads it. */
export function namedActor(actor: string, name: string | null) {
  const tokens = new Map<string, string>();
  if (name !== null && actor.startsWith("token:")) tokens.set(actor.slice("token:".length), name);
  return actorText(actor, { tokens, servers: new Map() });
}

/** How many distinct server actors a page looks up by id (one ledger read each). */
const SERVER_LOOKUPS = 20;

/**
 * Names for the actors of `entries`: the operator tokens' names (an admin session may list them;
 * others see short ids) and the hostnames of servers that acted, from the entries themselves
 * where a server is also the target, else read by id.
 */
export async function actorNames(v: View, entries: Pick<Entry, "actor" | "target" | "hostname">[]): Promise<Names> {
  const servers = new Map<string, { hostname: string; fleet?: string }>();
  for (const e of entries)
    if (e.target.startsWith("server:") && e.hostname) servers.set(e.target.slice(7), { hostname: e.hostname });
  const wanted = [...new Set(entries.filter((e) => e.actor.startsWith("server:")).map((e) => e.actor.slice(7)))].filter(
    (id) => !servers.has(id) && /^[0-9a-f-]{36}$/.test(id),
  );
  const tokens = new Map<string, string>();
  const wantTokens = entries.some(
    (e) => (e.actor.startsWith("token:") && e.actor !== `token:${BOOTSTRAP_ID}`) || e.target.startsWith("token:"),
  );
  const [tokenPage, found] = await Promise.all([
    wantTokens && v.session.scope === "admin"
      ? v.api<{ items: z.output<typeof Token>[] }>("GET", `/v1/tokens${qs({ kind: "operator", limit: 200 })}`)
      : null,
    Promise.all(
      wanted.slice(0, SERVER_LOOKUPS).map((id) => v.api<z.output<typeof ServerDetail>>("GET", `/v1/servers/${id}`)),
    ),
  ]);
  if (tokenPage?.ok) for (const t of tokenPage.json.items) tokens.set(t.id, t.name);
  for (const res of found) if (res.ok) servers.set(res.json.id, { hostname: res.json.hostname, fleet: res.json.fleet });
  return { tokens, servers };
}

/** One value of a detail as text: scalars as they are, lists joined, objects as `key: value` pairs. */
function valueText(value: unknown, depth = 0): string {
  if (value === null || value === undefined) return "none";
  if (typeof value === "string") return value;
  if (typeof value === "number" || typeof value === "boolean") return String(value);
  if (Array.isArray(value)) return value.length ? value.map((x) => valueText(x, depth + 1)).join(", ") : "none";
  if (typeof value === "object") {
    const pairs = Object.entries(value as Record<string, unknown>);
    if (pairs.length === 0) return "none";
    if (depth > 1) return `${pairs.length} field(s)`;
    return pairs.map(([k, x]) => `${k.replace(/_/g, " ")}: ${valueText(x, depth + 1)}`).join("; ");
  }
  return String(value);
}

const DETAIL_FIELDS = 12;
const DETAIL_CHARS = 240;

/** An entry's details as labelled text, not raw JSON: each field on its own line, long ones cut. */
export const AuditDetails = ({ details }: { details: unknown }) => {
  if (details === null || details === undefined) return <span class="muted">—</span>;
  if (typeof details !== "object" || Array.isArray(details)) return <span>{valueText(details)}</span>;
  const pairs = Object.entries(details as Record<string, unknown>);
  if (pairs.length === 0) return <span class="muted">—</span>;
  const cut = (t: string) => (t.length > DETAIL_CHARS ? `${t.slice(0, DETAIL_CHARS)}…` : t);
  return (
    <dl class="details">
      {pairs.slice(0, DETAIL_FIELDS).map(([k, x]) => (
        <>
          <dt>{k.replace(/_/g, " ")}</dt>
          <dd>{cut(valueText(x))}</dd>
        </>
      ))}
      {pairs.length > DETAIL_FIELDS ? (
        <>
          <dt>…</dt>
          <dd>{pairs.length - DETAIL_FIELDS} more field(s)</dd>
        </>
      ) : null}
    </dl>
  );
};
