/**
 * What the walks over every operation of the OpenAPI document share (test/wrong-credentials.test.ts,
 * test/fuzzed-input.test.ts): a fleet with something of everything, each operation's path filled
 * with its names, and a fingerprint of D1 and the fleet's objects to compare before and after.
 */
import { env } from "cloudflare:test";
import { expect } from "vitest";
import { call, registerServer, settle, uniq } from "./helpers";
import { AGENT, drain, fleetWithAgent, startRollout } from "./rollout-helpers";

export interface WalkWorld {
  fleet: string;
  server: { id: string; token: string };
  rollout: string;
  webhook: string;
  enrollment: { id: string; token: string };
  key: string;
  token: { id: string; token: string };
}

/** A fleet with a server, a running rollout, a webhook, an enrollment token, a FleetLock key and a read token. */
export async function walkWorld(): Promise<WalkWorld> {
  const { fleet, hosts } = await fleetWithAgent(1);
  const rollout = await startRollout({ fleet });
  const hook = await call("POST", `/v1/fleets/${fleet}/webhooks`, {
    body: { url: "https://hooks.example.com/walk", events: ["server.stale"] },
  });
  const enrollment = await call("POST", `/v1/fleets/${fleet}/enrollment-tokens`, {
    body: { expires_at: new Date(Date.now() + 86400_000).toISOString() },
  });
  const key = await call("POST", `/v1/fleets/${fleet}/fleetlock-key`);
  const token = await call("POST", "/v1/tokens", { body: { name: uniq("walk"), scope: "read" } });
  for (const res of [hook, enrollment, key, token]) expect(res.status, JSON.stringify(res.json)).toBe(201);
  const other = await registerServer(fleet, { fleetlock_id: uniq("node") });
  // What the setup set going lands before the walks take their first fingerprint.
  await drain(rollout.id);
  for (const id of [hosts[0].id, other.id]) await settle(id);
  return {
    fleet,
    server: { id: hosts[0].id, token: hosts[0].token },
    rollout: rollout.id,
    webhook: hook.json.webhook.id,
    enrollment: { id: enrollment.json.id, token: enrollment.json.token },
    key: key.json.key,
    token: { id: token.json.id, token: token.json.token },
  };
}

export interface Operation {
  method: string;
  path: string;
  op: any;
}

/** Every operation the served OpenAPI document lists. */
export async function operations(): Promise<Operation[]> {
  const doc = (await call("GET", "/openapi.json", { token: null })).json;
  const ops: Operation[] = [];
  for (const [path, item] of Object.entries<Record<string, any>>(doc.paths)) {
    for (const [method, op] of Object.entries<any>(item)) {
      if (["get", "post", "put", "patch", "delete"].includes(method))
        ops.push({ method: method.toUpperCase(), path, op });
    }
  }
  return ops;
}

/** The operation's path with the world's names, so that a right caller would reach real things. */
export function fill(w: WalkWorld, path: string, overrides: Record<string, string> = {}) {
  const id = path.startsWith("/v1/fleets/{id}")
    ? w.fleet
    : path.includes("/webhooks/")
      ? w.webhook
      : path.includes("/enrollment-tokens/")
        ? w.enrollment.id
        : path.startsWith("/v1/servers/")
          ? w.server.id
          : path.startsWith("/v1/rollouts/")
            ? w.rollout
            : path.startsWith("/v1/tokens/")
              ? w.token.id
              : "00000000-0000-4000-8000-000000000000";
  const values: Record<string, string> = {
    fleet: w.fleet,
    id,
    server: w.server.id,
    group: "default",
    agent: AGENT,
    role: "web",
    key: w.key,
    target: "linux-x64",
    file: "linux-x64",
    part: "1",
    token_id: w.token.id,
    day: "2026-01-01",
    ...overrides,
  };
  return path.replace(/\{(\w+)\}/g, (_, name: string) => values[name]);
}

/** Whether the operation takes no credential at all (health, downloads, sign-in starts, FleetLock's key in the path). */
export const isOpen = (op: any) => (op.security ?? []).length === 0;

/**
 * D1 as rows and the world's objects as their own answers: what a refused request must leave as
 * it was. Heartbeats, staleness and the answers' clocks move by themselves; the rest must not.
 */
export async function fingerprint(w: WalkWorld) {
  const tables = await env.DB.prepare(
    "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' AND name NOT LIKE '_cf_%' AND name != 'd1_migrations' ORDER BY name",
  ).all<{ name: string }>();
  const rows: Record<string, unknown> = {};
  for (const { name } of tables.results) {
    // A request's own bookkeeping, not a change it made: the last use of the token that sent it.
    const all = (await env.DB.prepare(`SELECT * FROM "${name}"`).all()).results;
    rows[name] =
      name === "tokens"
        ? all.map((row) => Object.fromEntries(Object.entries(row).filter(([k]) => k !== "last_used_at")))
        : all;
  }
  const objects = await Promise.all(
    [
      `/v1/servers/${w.server.id}`,
      `/v1/fleets/${w.fleet}/spec`,
      `/v1/fleets/${w.fleet}/reboot-groups`,
      `/v1/fleets/${w.fleet}/gates`,
      `/v1/rollouts/${w.rollout}`,
      `/v1/fleets/${w.fleet}/webhooks`,
    ].map(async (p) => {
      const res = await call("GET", p);
      return JSON.stringify(res.json, (k, v) =>
        ["last_seen", "stale_at", "at", "now", "request_id"].includes(k) ? undefined : v,
      );
    }),
  );
  return JSON.stringify({ rows, objects });
}

/** The API's error shape: {error: {code, message, details?}} (FleetLock speaks {kind, value}). */
export function errorShapeProblem(path: string, json: any): string | null {
  if (path.startsWith("/fleetlock/")) {
    return typeof json?.kind === "string" && typeof json?.value === "string" ? null : "not {kind, value}";
  }
  const e = json?.error;
  if (!e || typeof e.code !== "string" || typeof e.message !== "string") return "not {error: {code, message}}";
  const extra = Object.keys(e).filter((k) => !["code", "message", "details", "request_id"].includes(k));
  return extra.length ? `unexpected error keys ${extra.join(", ")}` : null;
}
