/**
 * The operator API for hm, the simulator and the e2e tests: the shared typed client
 * (`createClient`, hono `hc` over AppType) with one method per call, so callers get domain
 * values and failures arrive as ApiError with the API's code and message.
 */
import type { ClientResponse } from "hono/client";
import { createClient, type Client } from "../src/client/index.ts";
import { ApiError, apiErrorOf, type FetchLike } from "../agent/http.ts";
import type { FleetHistory as FleetHistoryJson } from "../src/history/schemas.ts";

export { ApiError };

/** The JSON of a response's 2xx variants. */
type Success<R> = R extends ClientResponse<infer T, infer S, infer _F> ? (S extends 200 | 201 ? T : never) : never;

async function ok<R extends ClientResponse<unknown, number, any>>(pending: Promise<R>): Promise<Success<R>> {
  const res = await pending;
  if (!res.ok) throw await apiErrorOf(res as unknown as Response);
  // 204 (a delete) has no body to parse.
  if (res.status === 204) return undefined as Success<R>;
  return (await res.json()) as Success<R>;
}

type Methods = ReturnType<typeof methods>;
export type Fleet = Awaited<ReturnType<Methods["getFleet"]>>;
export type FleetHealth = Awaited<ReturnType<Methods["fleetsHealth"]>>[number];
export type ServerSummary = Awaited<ReturnType<Methods["listServers"]>>[number];
export type ServerDetail = Awaited<ReturnType<Methods["getServer"]>>;
export type ServerPatch = Parameters<Methods["patchServer"]>[1];
export type ServerStatus = ServerDetail["status"];
export type DesiredConfigInput = Parameters<Methods["putDesired"]>[1];
export type RebootGroup = Awaited<ReturnType<Methods["getGroup"]>>;
export type AuditEntry = Awaited<ReturnType<Methods["audit"]>>["items"][number];
export type Rollout = Awaited<ReturnType<Methods["getRollout"]>>;
export type RolloutInput = Parameters<Methods["startRollout"]>[0];
export type StatusAnswer = Awaited<ReturnType<Methods["status"]>>;
export type Role = Awaited<ReturnType<Methods["listRoles"]>>[number];
export type FleetPatch = Parameters<Methods["patchFleet"]>[1];
type AgentBuild = Awaited<ReturnType<Methods["getAgentBuild"]>>;
export type Image = Awaited<ReturnType<Methods["getImage"]>>;
export type FleetHistory = Awaited<ReturnType<Methods["history"]>>;
interface Page<T> {
  items: T[];
  next_cursor: string | null;
}

/** Every page of a cursor-paged list, up to `max` items. */
async function all<T>(fetchPage: (cursor: string | undefined) => Promise<Page<T>>, max = 100_000): Promise<T[]> {
  const out: T[] = [];
  let cursor: string | null = null;
  do {
    const page: Page<T> = await fetchPage(cursor ?? undefined);
    out.push(...page.items);
    cursor = page.next_cursor;
  } while (cursor && out.length < max);
  return out.slice(0, max);
}

const PAGE = "200";

/** How often a create that is safe to send again is sent when no answer comes back. */
const CREATE_ATTEMPTS = 3;
const RETRY_PAUSE_MS = 300;

/**
 * Sends a request that is safe to send again (it carries an Idempotency-Key, or names what it
 * creates) until an answer comes back: a dropped connection, an answer cut off, or a gateway's
 * 502-504 is tried again, up to CREATE_ATTEMPTS times; any other answer is the answer.
 */
async function retried<T>(send: () => Promise<T>): Promise<T> {
  for (let attempt = 1; ; attempt++) {
    try {
      return await send();
    } catch (err) {
      const answered = err instanceof ApiError && !(err.status >= 502 && err.status <= 504);
      if (answered || attempt >= CREATE_ATTEMPTS) throw err;
      await new Promise((resolve) => setTimeout(resolve, RETRY_PAUSE_MS * attempt));
    }
  }
}

/**
 * A server as operators name it (id, hostname, or fleet/hostname) for a path segment: hc puts
 * params in the path as they are, so the slash of fleet/hostname is encoded here.
 */
const srv = (ref: string) => encodeURIComponent(ref);

function methods(c: Client) {
  return {
    // fleets
    /** One cheap read every operator scope may do: proves a URL and token. */
    probe: () => ok(c.v1.fleets.$get({ query: { limit: "1" } })),
    listFleets: () => all((cursor) => ok(c.v1.fleets.$get({ query: { limit: PAGE, cursor } }))),
    getFleet: (id: string) => ok(c.v1.fleets[":id"].$get({ param: { id } })),
    createFleet: (json: Parameters<Client["v1"]["fleets"]["$post"]>[0]["json"]) => ok(c.v1.fleets.$post({ json })),
    patchFleet: (id: string, json: Parameters<Client["v1"]["fleets"][":id"]["$patch"]>[0]["json"]) =>
      ok(c.v1.fleets[":id"].$patch({ param: { id }, json })),
    deleteFleet: (id: string) => ok(c.v1.fleets[":id"].$delete({ param: { id } })),
    refreshFleet: (fleet: string, cursor?: string) =>
      ok(c.v1.fleets[":fleet"].refresh.$post({ param: { fleet }, query: { limit: PAGE, cursor } })),
    fleetsHealth: () => all((cursor) => ok(c.v1.status.fleets.$get({ query: { cursor } }))),
    status: (query: { fleet?: string; attention?: number } = {}) =>
      ok(c.v1.status.$get({ query: { fleet: query.fleet, attention: query.attention?.toString() } })),

    // fleet intent
    listChannels: (fleet: string) =>
      all((cursor) => ok(c.v1.fleets[":fleet"].channels.$get({ param: { fleet }, query: { limit: PAGE, cursor } }))),
    getChannel: (fleet: string, agent: string, limit = 10) =>
      ok(c.v1.fleets[":fleet"].channels[":agent"].$get({ param: { fleet, agent }, query: { limit: String(limit) } })),
    putChannel: (fleet: string, agent: string, json: { image: string; version: string }) =>
      ok(c.v1.fleets[":fleet"].channels[":agent"].$put({ param: { fleet, agent }, json })),
    listRoles: (fleet: string) =>
      all((cursor) => ok(c.v1.fleets[":fleet"].roles.$get({ param: { fleet }, query: { limit: PAGE, cursor } }))),
    getRole: (fleet: string, role: string) => ok(c.v1.fleets[":fleet"].roles[":role"].$get({ param: { fleet, role } })),
    putRole: (
      fleet: string,
      role: string,
      json: Parameters<Client["v1"]["fleets"][":fleet"]["roles"][":role"]["$put"]>[0]["json"],
    ) => ok(c.v1.fleets[":fleet"].roles[":role"].$put({ param: { fleet, role }, json })),
    deleteRole: (fleet: string, role: string) =>
      ok(c.v1.fleets[":fleet"].roles[":role"].$delete({ param: { fleet, role } })),

    // images
    /** Named by its name and version, so sending it again answers the same image: retried. */
    registerImage: (json: Parameters<Client["v1"]["images"]["$post"]>[0]["json"]) =>
      retried(() => ok(c.v1.images.$post({ json }))),
    listImages: (query: { name?: string; version?: string } = {}) =>
      all((cursor) => ok(c.v1.images.$get({ query: { ...query, limit: PAGE, cursor } }))),
    getImage: (id: string) => ok(c.v1.images[":id"].$get({ param: { id } })),
    /** Completing again finds the upload or the object where the previous call left them: retried. */
    completeImage: (id: string) => retried(() => ok(c.v1.images[":id"].complete.$post({ param: { id } }))),
    deleteImage: (id: string) => ok(c.v1.images[":id"].$delete({ param: { id } })),

    // servers
    listServers: (
      filter: {
        fleet?: string;
        status?: ServerStatusFilter;
        state?: ServerStateFilter;
        hostname?: string;
        label?: string[];
      } = {},
      max?: number,
    ) => all((cursor) => ok(c.v1.servers.$get({ query: { ...filter, limit: PAGE, cursor } })), max),
    getServer: (id: string) => ok(c.v1.servers[":id"].$get({ param: { id: srv(id) } })),
    registerServer: (json: Parameters<Client["v1"]["servers"]["$post"]>[0]["json"]) => ok(c.v1.servers.$post({ json })),
    patchServer: (id: string, json: Parameters<Client["v1"]["servers"][":id"]["$patch"]>[0]["json"]) =>
      ok(c.v1.servers[":id"].$patch({ param: { id: srv(id) }, json })),
    getDesired: (id: string) => ok(c.v1.servers[":id"].desired.$get({ param: { id: srv(id) } })),
    putDesired: (id: string, json: Parameters<Client["v1"]["servers"][":id"]["desired"]["$put"]>[0]["json"]) =>
      ok(c.v1.servers[":id"].desired.$put({ param: { id: srv(id) }, json })),
    releaseDesired: (id: string) => ok(c.v1.servers[":id"].desired.release.$post({ param: { id: srv(id) } })),
    refreshServer: (id: string) => ok(c.v1.servers[":id"].refresh.$post({ param: { id: srv(id) } })),
    rotateServerToken: (id: string) => ok(c.v1.servers[":id"].token.$post({ param: { id: srv(id) } })),

    listInstances: (filter: { server?: string; agent?: string; image?: string; label?: string[] } = {}, max?: number) =>
      all((cursor) => ok(c.v1.instances.$get({ query: { ...filter, limit: PAGE, cursor } })), max),

    // reboot coordination
    listGroups: (fleet: string) => ok(c.v1.fleets[":fleet"]["reboot-groups"].$get({ param: { fleet } })),
    getGroup: (fleet: string, group: string) =>
      ok(c.v1.fleets[":fleet"]["reboot-groups"][":group"].$get({ param: { fleet, group } })),
    putGroup: (
      fleet: string,
      group: string,
      json: Parameters<Client["v1"]["fleets"][":fleet"]["reboot-groups"][":group"]["$put"]>[0]["json"],
    ) => ok(c.v1.fleets[":fleet"]["reboot-groups"][":group"].$put({ param: { fleet, group }, json })),
    releaseHolder: (fleet: string, group: string, id: string) =>
      ok(c.v1.fleets[":fleet"]["reboot-groups"][":group"].holders[":id"].$delete({ param: { fleet, group, id } })),
    rotateFleetlockKey: (fleet: string) => ok(c.v1.fleets[":fleet"]["fleetlock-key"].$post({ param: { fleet } })),
    listFixHolds: (fleet: string) => ok(c.v1.fleets[":fleet"]["fix-holds"].$get({ param: { fleet } })),
    releaseFixHold: (fleet: string, server: string) =>
      ok(c.v1.fleets[":fleet"]["fix-holds"][":server"].$delete({ param: { fleet, server } })),

    // tokens
    listTokens: (kind?: "operator" | "server") =>
      all((cursor) => ok(c.v1.tokens.$get({ query: { kind, limit: PAGE, cursor } }))),
    createToken: (json: Parameters<Client["v1"]["tokens"]["$post"]>[0]["json"]) => ok(c.v1.tokens.$post({ json })),
    revokeToken: (id: string) => ok(c.v1.tokens[":id"].$delete({ param: { id } })),

    // sign-in through an identity provider
    listSsoMappings: () => ok(c.v1.sso.mappings.$get()),
    createSsoMapping: (json: Parameters<Client["v1"]["sso"]["mappings"]["$post"]>[0]["json"]) =>
      ok(c.v1.sso.mappings.$post({ json })),
    deleteSsoMapping: (id: string) => ok(c.v1.sso.mappings[":id"].$delete({ param: { id } })),
    listSsoSessions: () => ok(c.v1.sso.sessions.$get()),
    endSsoSession: (token_id: string) => ok(c.v1.sso.sessions[":token_id"].$delete({ param: { token_id } })),

    decommission: (id: string, body: { force?: boolean; reason?: string } = {}) =>
      ok(
        c.v1.servers[":id"].decommission.$post({
          param: { id: srv(id) },
          json: { force: body.force ?? false, reason: body.reason },
        }),
      ),
    cancelDecommission: (id: string) => ok(c.v1.servers[":id"].decommission.cancel.$post({ param: { id: srv(id) } })),
    checkServerAgents: (filter: { fleet?: string; server?: string; agent?: string }, cursor?: string) =>
      ok(c.v1.check["server-agents"].$get({ query: { ...filter, limit: PAGE, cursor } })),
    fixServerAgents: (filter: { fleet?: string; server?: string; agent?: string }, dryRun: boolean, cursor?: string) =>
      ok(c.v1.check["server-agents"].fix.$post({ json: { ...filter, dry_run: dryRun, limit: Number(PAGE), cursor } })),

    // rollouts
    startRollout: (json: Parameters<Client["v1"]["rollouts"]["$post"]>[0]["json"]) => ok(c.v1.rollouts.$post({ json })),
    getRollout: (id: string) => ok(c.v1.rollouts[":id"].$get({ param: { id }, query: {} })),
    /** Parks until the rollout's `change` moves past `since` (at most `waitS` seconds). */
    waitRollout: (id: string, since: number, waitS: number) =>
      ok(
        c.v1.rollouts[":id"].$get({ param: { id }, query: { wait: String(Math.floor(waitS)), since: String(since) } }),
      ),
    listRollouts: (filter: { fleet?: string; agent?: string; state?: RolloutStateFilter } = {}, max?: number) =>
      all((cursor) => ok(c.v1.rollouts.$get({ query: { ...filter, limit: PAGE, cursor } })), max),
    rolloutTargets: (id: string, state?: RolloutTargetStateFilter, max?: number, pass?: number) =>
      all(
        (cursor) =>
          ok(
            c.v1.rollouts[":id"].targets.$get({
              param: { id },
              query: { state, pass: pass?.toString(), limit: PAGE, cursor },
            }),
          ),
        max,
      ),
    rolloutEvents: (id: string, max?: number) =>
      all((cursor) => ok(c.v1.rollouts[":id"].events.$get({ param: { id }, query: { limit: PAGE, cursor } })), max),
    endRolloutTarget: (id: string, server: string, reason?: string) =>
      ok(
        c.v1.rollouts[":id"].targets[":server"].end.$post({
          param: { id, server: srv(server) },
          json: reason ? { reason } : {},
        }),
      ),
    controlRollout: (id: string, action: "pause" | "resume" | "cancel" | "rollback") =>
      ok(c.v1.rollouts[":id"][action].$post({ param: { id } })),

    // enrollment and agent builds (docs/images-and-enrollment.md)
    listEnrollmentTokens: (fleet: string) =>
      all((cursor) =>
        ok(c.v1.fleets[":fleet"]["enrollment-tokens"].$get({ param: { fleet }, query: { limit: PAGE, cursor } })),
      ),
    /** One key for the call, however often it is sent: a retry is the same create, never a second token. */
    createEnrollmentToken: (
      fleet: string,
      json: Parameters<Client["v1"]["fleets"][":fleet"]["enrollment-tokens"]["$post"]>[0]["json"],
      key: string = crypto.randomUUID(),
    ) =>
      retried(() =>
        ok(
          c.v1.fleets[":fleet"]["enrollment-tokens"].$post({
            param: { fleet },
            header: { "idempotency-key": key },
            json,
          }),
        ),
      ),
    revokeEnrollmentToken: (fleet: string, id: string) =>
      ok(c.v1.fleets[":fleet"]["enrollment-tokens"][":id"].$delete({ param: { fleet, id } })),
    getAgentBuild: (target: string) => ok(c.v1.agent.builds[":target"].$get({ param: { target } })),

    // history
    // The route also answers text/csv (historyCsv below); this asks for, and gets, its JSON.
    history: async (fleet: string, query: { metric?: string; since?: string; agent?: string }) =>
      (await ok(c.v1.fleets[":fleet"].history.$get({ param: { fleet }, query }))) as FleetHistoryJson,

    // upgrades, audit
    upgrades: (query: { limit?: number; cursor?: string } = {}) =>
      ok(c.v1.upgrades.$get({ query: { limit: query.limit?.toString(), cursor: query.cursor } })),
    runUpgrades: () => ok(c.v1.upgrades.run.$post()),
    auditDaysPage: (from?: string) => ok(c.v1.audit.days.$get({ query: { from } })),
    audit: (query: { target?: string; limit?: number; cursor?: string | null } = {}) =>
      ok(
        c.v1.audit.$get({
          query: { target: query.target, limit: query.limit?.toString(), cursor: query.cursor ?? undefined },
        }),
      ),
  };
}

type ServerStateFilter = NonNullable<Parameters<Client["v1"]["servers"]["$get"]>[0]>["query"]["state"];
type RolloutStateFilter = NonNullable<Parameters<Client["v1"]["rollouts"]["$get"]>[0]>["query"]["state"];
type RolloutTargetStateFilter = NonNullable<
  Parameters<Client["v1"]["rollouts"][":id"]["targets"]["$get"]>[0]
>["query"]["state"];

type ServerStatusFilter = NonNullable<Parameters<Client["v1"]["servers"]["$get"]>[0]>["query"]["status"];

// oxlint-disable-next-line typescript/no-unsafe-declaration-merging -- the command methods are mixed in below
export interface Api extends Methods {}

export class Api {
  private readonly token: string;
  private readonly fetchImpl: FetchLike;
  readonly base: string;
  private readonly client: Client;

  constructor(baseUrl: string, token: string, fetchImpl: FetchLike = (i, init) => fetch(i, init)) {
    this.token = token;
    this.fetchImpl = fetchImpl;
    this.base = baseUrl.replace(/\/+$/, "");
    this.client = createClient(this.base, token, {
      fetch: (input: string | URL | Request, init?: RequestInit) => this.fetchImpl(input as string, init),
    });
    Object.assign(this, methods(this.client));
  }

  /**
   * PUT /v1/agent/builds/{target}: the file gzip-compressed as it streams (never read whole into
   * memory; a ~110 MB executable travels as ~40 MB, within the Workers request limit), with its
   * own length and SHA-256, which R2 checks against what it stores. Raw bytes, so not through hc.
   */
  async publishAgentBuild(
    target: string,
    file: { body: ReadableStream<Uint8Array>; size: number; sha256: string; version: string },
  ) {
    const res = await this.fetchImpl(`${this.base}/v1/agent/builds/${encodeURIComponent(target)}`, {
      method: "PUT",
      headers: {
        Authorization: `Bearer ${this.token}`,
        "Content-Type": "application/octet-stream",
        "Content-Encoding": "gzip",
        "X-Agent-Size": String(file.size),
        "X-Agent-Version": file.version,
        "X-Checksum-Sha256": file.sha256,
      },
      body: file.body,
      duplex: "half",
    } as RequestInit);
    if (!res.ok) throw await apiErrorOf(res);
    return (await res.json()) as AgentBuild;
  }

  /**
   * PUT one part of an image's upload: `body` streams (a file's range), `length` bytes; the raw
   * octet-stream body is outside the typed client, so the request is built here.
   */
  async putImagePart(id: string, part: number, body: ReadableStream<Uint8Array>, length: number, signal?: AbortSignal) {
    const url = this.client.v1.images[":id"].parts[":part"].$url({ param: { id, part: String(part) } });
    const res = await this.fetchImpl(url.toString(), {
      method: "PUT",
      headers: {
        Authorization: `Bearer ${this.token}`,
        "Content-Type": "application/octet-stream",
        "Content-Length": String(length),
      },
      body,
      signal,
      duplex: "half",
    } as RequestInit);
    if (!res.ok) throw await apiErrorOf(res);
    return (await res.json()) as {
      part: number;
      size: number;
      upload: { part_size: number; parts: number; received: number[] };
    };
  }

  /** The fleet's history as CSV (`?format=csv`): text, so outside the typed client's JSON. */
  async historyCsv(fleet: string, query: { metric?: string; since?: string; agent?: string }) {
    const url = this.client.v1.fleets[":fleet"].history.$url({ param: { fleet }, query: {} });
    for (const [k, v] of Object.entries(query)) if (v !== undefined) url.searchParams.set(k, v);
    url.searchParams.set("format", "csv");
    const res = await this.fetchImpl(url.toString(), { headers: { Authorization: `Bearer ${this.token}` } });
    if (!res.ok) throw await apiErrorOf(res);
    return res.text();
  }

  /** A raw GET of the API (NDJSON answers, outside the typed client's JSON); refusals as ApiError. */
  private async getText(url: URL) {
    const res = await this.fetchImpl(url.toString(), { headers: { Authorization: `Bearer ${this.token}` } });
    if (!res.ok) throw await apiErrorOf(res);
    return { res, text: await res.text() };
  }

  /** One page of the audit export: its NDJSON lines, the cursor after them and whether more are there. */
  async exportAudit(query: { since?: string; cursor?: string; limit?: number }) {
    // (The NDJSON routes are outside hc's typing: zod-openapi has no typed answer for that media type.)
    const url = new URL(`${this.base}/v1/audit/export`);
    if (query.cursor) url.searchParams.set("cursor", query.cursor);
    else if (query.since) url.searchParams.set("since", query.since);
    if (query.limit) url.searchParams.set("limit", String(query.limit));
    const { res, text } = await this.getText(url);
    return { text, cursor: res.headers.get("X-Next-Cursor") ?? "", more: res.headers.get("X-More") === "true" };
  }

  /** Every audit day file's listing, oldest first, from `from` (YYYY-MM-DD) on. */
  async auditDays(from?: string) {
    const out: Awaited<ReturnType<Methods["auditDaysPage"]>>["items"] = [];
    let next: string | null | undefined = from;
    do {
      const page: Awaited<ReturnType<Methods["auditDaysPage"]>> = await this.auditDaysPage(next ?? undefined);
      out.push(...page.items);
      next = page.next_from;
    } while (next);
    return out;
  }

  /** One audit day file, as written. */
  async auditDay(day: string) {
    return (await this.getText(new URL(`${this.base}/v1/audit/days/${encodeURIComponent(day)}`))).text;
  }

  /** GET a server with its view's ETag. */
  async getServerTagged(id: string) {
    const res = await this.client.v1.servers[":id"].$get({ param: { id: encodeURIComponent(id) } });
    if (!res.ok) throw await apiErrorOf(res as unknown as Response);
    return { etag: res.headers.get("ETag"), server: (await res.json()) as ServerDetail };
  }

  /**
   * Long poll on a server's view: answers at its next change after `etag`, or `server: null`
   * (304) when `waitS` runs out first. `wait` is validated by the route's handler, not declared
   * in its typed request, so the URL is built here.
   */
  async waitServer(id: string, etag: string, waitS: number, signal?: AbortSignal) {
    const url = this.client.v1.servers[":id"].$url({ param: { id: encodeURIComponent(id) } });
    url.searchParams.set("wait", String(Math.floor(waitS)));
    const res = await this.fetchImpl(url.toString(), {
      headers: { Authorization: `Bearer ${this.token}`, "If-None-Match": etag },
      signal,
    });
    if (res.status === 304) {
      await res.body?.cancel();
      return { etag: res.headers.get("ETag") ?? etag, server: null };
    }
    if (!res.ok) throw await apiErrorOf(res);
    return { etag: res.headers.get("ETag") ?? etag, server: (await res.json()) as ServerDetail };
  }
}
