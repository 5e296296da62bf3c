/**
 * The operator API, typed. A thin fetch wrapper kept in this one module: every caller (hm, the
 * simulator, the e2e tests) goes through these methods, so moving onto the shared hono client
 * (`createClient` in src/client/) changes this file only. Types come from the route schemas.
 */
import type { z } from "@hono/zod-openapi";
import type { Fleet, FleetInput, ServerCreated, ServerDetail, ServerInput, ServerSummary } from "../src/fleet/schemas";
import type { FleetlockKeyCreated, GroupInput, GroupSchema, ServerRebootPatch } from "../src/fleetlock/schemas";
import type { agentStatus, DesiredConfig as DesiredSchema, DesiredConfigInput as DesiredInputSchema, serverStatus } from "../src/ledger/schemas";
import { ApiError, apiErrorOf, type FetchLike } from "../agent/http";
import type {
  RolloutInput as RolloutInputSchema,
  RolloutListItem as RolloutListItemSchema,
  RolloutSchema,
  TargetSchema,
} from "../src/rollouts/schemas";

export { ApiError };

export type Fleet = z.infer<typeof Fleet>;
export type FleetInput = z.input<typeof FleetInput>;
export type ServerInput = z.input<typeof ServerInput>;
export type ServerSummary = z.infer<typeof ServerSummary>;
export type ServerDetail = z.infer<typeof ServerDetail>;
export type ServerCreated = z.infer<typeof ServerCreated>;
export type ServerPatch = z.input<typeof ServerRebootPatch>;
export type ServerStatus = z.infer<typeof serverStatus>;
export type DesiredConfig = z.infer<typeof DesiredSchema>;
export type DesiredConfigInput = z.input<typeof DesiredInputSchema>;
export type RebootGroup = z.infer<typeof GroupSchema>;
export type RebootGroupInput = z.input<typeof GroupInput>;
export type FleetlockKey = z.infer<typeof FleetlockKeyCreated>;

// Schemas the routes keep to themselves (src/auth/routes.ts, src/audit/routes.ts,
// src/instances/routes.ts, src/upgrades/routes.ts); the shared client will carry them.
export interface Token {
  id: string;
  kind: "operator" | "server";
  scope: "read" | "write" | "admin" | "server";
  server_id: string | null;
  name: string;
  created_by: string;
  created_at: string;
  revoked_at: string | null;
}
export interface AuditEntry {
  id: number;
  at: string;
  actor: string;
  action: string;
  target: string;
  details: unknown;
}
export interface Instance {
  server_id: string;
  fleet: string;
  agent: string;
  instance_id: string | null;
  desired: { image: string; version: string | null } | null;
  reported: { image: string; version: string | null; state: string | null } | null;
  status: z.infer<typeof agentStatus>;
}
export interface UpgradeStatus {
  state: "current" | "pending" | "running" | "failing";
  data_version: number;
  newest_version: number;
  pending: { version: number; description: string }[];
  lease: Record<string, unknown> | null;
  last_run: Record<string, unknown> | null;
  history: Page<{ id: number; version: number; description: string; runner: string; state: string; started_at: string; finished_at: string | null; error: string | null }>;
}
/** Rollouts (issue 9): the schemas of src/rollouts/schemas.ts. */
export type Rollout = z.infer<typeof RolloutSchema>;
export type RolloutInput = z.input<typeof RolloutInputSchema>;
export type RolloutTarget = z.infer<typeof TargetSchema>;
export type RolloutListItem = z.infer<typeof RolloutListItemSchema>;

export interface Page<T> {
  items: T[];
  next_cursor: string | null;
}

type Query = Record<string, string | number | undefined | null>;

export class Api {
  readonly base: string;

  constructor(
    baseUrl: string,
    private readonly token: string,
    private readonly fetchImpl: FetchLike = (i, init) => fetch(i, init),
  ) {
    this.base = baseUrl.replace(/\/+$/, "");
  }

  /** One call; non-2xx answers throw ApiError (code and message from the API's error body). */
  async request<T>(
    method: string,
    path: string,
    opts: { query?: Query; body?: unknown; headers?: Record<string, string>; signal?: AbortSignal; allow304?: boolean } = {},
  ): Promise<{ status: number; data: T; headers: Headers }> {
    const qs = new URLSearchParams();
    for (const [k, v] of Object.entries(opts.query ?? {})) if (v !== undefined && v !== null && v !== "") qs.set(k, String(v));
    const url = `${this.base}${path}${qs.size ? `?${qs}` : ""}`;
    const headers: Record<string, string> = { Authorization: `Bearer ${this.token}`, ...opts.headers };
    if (opts.body !== undefined) headers["Content-Type"] = "application/json";
    const res = await this.fetchImpl(url, {
      method,
      headers,
      body: opts.body === undefined ? undefined : JSON.stringify(opts.body),
      signal: opts.signal,
    });
    if (res.status === 304 && opts.allow304) return { status: 304, data: null as T, headers: res.headers };
    if (!res.ok) throw await apiErrorOf(res);
    const text = await res.text();
    return { status: res.status, data: (text ? JSON.parse(text) : null) as T, headers: res.headers };
  }

  private async get<T>(path: string, query?: Query) {
    return (await this.request<T>("GET", path, { query })).data;
  }

  /** Every page of a cursor-paged list, up to `max` items. */
  async all<T>(path: string, query: Query = {}, max = 100_000): Promise<T[]> {
    const out: T[] = [];
    let cursor: string | null = null;
    do {
      const page: Page<T> = await this.get<Page<T>>(path, { ...query, limit: 200, cursor });
      out.push(...page.items);
      cursor = page.next_cursor;
    } while (cursor && out.length < max);
    return out.slice(0, max);
  }

  health() {
    return this.get<{ ok: boolean }>("/healthz");
  }

  // fleets
  listFleets() {
    return this.all<Fleet>("/v1/fleets");
  }
  getFleet(id: string) {
    return this.get<Fleet>(`/v1/fleets/${enc(id)}`);
  }
  async createFleet(input: FleetInput) {
    return (await this.request<Fleet>("POST", "/v1/fleets", { body: input })).data;
  }

  // servers
  listServers(filter: { fleet?: string; status?: string } = {}, max?: number) {
    return this.all<ServerSummary>("/v1/servers", filter, max);
  }
  getServer(id: string) {
    return this.get<ServerDetail>(`/v1/servers/${enc(id)}`);
  }
  /**
   * Long poll on a server's view: answers at its next change after `etag`, or `null` (304) when
   * `waitS` runs out first.
   */
  async waitServer(id: string, etag: string, waitS: number, signal?: AbortSignal) {
    const res = await this.request<ServerDetail>("GET", `/v1/servers/${enc(id)}`, {
      query: { wait: waitS },
      headers: { "If-None-Match": etag },
      allow304: true,
      signal,
    });
    return { etag: res.headers.get("ETag") ?? etag, server: res.status === 304 ? null : res.data };
  }
  async getServerTagged(id: string) {
    const res = await this.request<ServerDetail>("GET", `/v1/servers/${enc(id)}`);
    return { etag: res.headers.get("ETag"), server: res.data };
  }
  async registerServer(input: ServerInput) {
    return (await this.request<ServerCreated>("POST", "/v1/servers", { body: input })).data;
  }
  async patchServer(id: string, patch: ServerPatch) {
    return (await this.request<ServerDetail>("PATCH", `/v1/servers/${enc(id)}`, { body: patch })).data;
  }
  getDesired(id: string) {
    return this.get<DesiredConfig>(`/v1/servers/${enc(id)}/desired`);
  }
  async putDesired(id: string, input: DesiredConfigInput) {
    return (await this.request<DesiredConfig>("PUT", `/v1/servers/${enc(id)}/desired`, { body: input })).data;
  }

  listInstances(filter: { server?: string; agent?: string; image?: string } = {}, max?: number) {
    return this.all<Instance>("/v1/instances", filter, max);
  }

  // reboot coordination
  listGroups(fleet: string) {
    return this.get<{ fleet: string; lock_ttl_s: number; items: RebootGroup[] }>(`/v1/fleets/${enc(fleet)}/reboot-groups`);
  }
  getGroup(fleet: string, group: string) {
    return this.get<RebootGroup>(`/v1/fleets/${enc(fleet)}/reboot-groups/${enc(group)}`);
  }
  async putGroup(fleet: string, group: string, input: RebootGroupInput) {
    return (await this.request<RebootGroup>("PUT", `/v1/fleets/${enc(fleet)}/reboot-groups/${enc(group)}`, { body: input })).data;
  }
  async releaseHolder(fleet: string, group: string, id: string) {
    return (
      await this.request<{ released: { id: string; server_id: string | null; granted_at: string }; group: RebootGroup }>(
        "DELETE",
        `/v1/fleets/${enc(fleet)}/reboot-groups/${enc(group)}/holders/${enc(id)}`,
      )
    ).data;
  }
  async rotateFleetlockKey(fleet: string) {
    return (await this.request<FleetlockKey>("POST", `/v1/fleets/${enc(fleet)}/fleetlock-key`)).data;
  }

  // tokens
  listTokens(filter: Query = {}) {
    return this.all<Token>("/v1/tokens", filter);
  }
  async createToken(input: { name: string; scope: "read" | "write" | "admin" }) {
    return (await this.request<Token & { token: string }>("POST", "/v1/tokens", { body: input })).data;
  }
  async revokeToken(id: string) {
    return (await this.request<Token>("DELETE", `/v1/tokens/${enc(id)}`)).data;
  }

  // upgrades, audit
  upgrades(query: Query = {}) {
    return this.get<UpgradeStatus>("/v1/upgrades", query);
  }
  async runUpgrades() {
    return (await this.request<Record<string, unknown>>("POST", "/v1/upgrades/run")).data;
  }
  // ---- rollouts (issue 9) ----

  async startRollout(input: RolloutInput) {
    return (await this.request<Rollout>("POST", "/v1/rollouts", { body: input })).data;
  }
  getRollout(id: string) {
    return this.get<Rollout>(`/v1/rollouts/${encodeURIComponent(id)}`);
  }
  /** Parks until the rollout's `change` moves past `since` (at most `waitS` seconds). */
  async waitRollout(id: string, since: number, waitS: number, signal?: AbortSignal) {
    return (await this.request<Rollout>("GET", `/v1/rollouts/${encodeURIComponent(id)}`, { query: { wait: waitS, since }, signal })).data;
  }
  listRollouts(filter: { fleet?: string; agent?: string; state?: string } = {}, max?: number) {
    return this.all<RolloutListItem>("/v1/rollouts", filter, max);
  }
  rolloutTargets(id: string, state?: string, max?: number) {
    return this.all<RolloutTarget>(`/v1/rollouts/${encodeURIComponent(id)}/targets`, { state }, max);
  }
  async controlRollout(id: string, action: "pause" | "resume" | "cancel" | "rollback") {
    return (await this.request<Rollout>("POST", `/v1/rollouts/${encodeURIComponent(id)}/${action}`)).data;
  }

  audit(query: { target?: string; limit?: number; cursor?: string | null } = {}) {
    return this.get<Page<AuditEntry>>("/v1/audit", query);
  }
}

const enc = encodeURIComponent;
