/**
 * Server workflows that span bindings. Each follows one rule: the object that owns the fact
 * commits first, and its outbox brings the other bindings along, so no step needs an undo and a
 * crash between any two steps leaves nothing dangling:
 * - fleetlock_id and hostname uniqueness are the fleet coordinator's: the name is reserved there
 *   first; when a reservation ends (RESERVATION_TTL_MS) the coordinator asks the server's ledger,
 *   so a workflow that died before its commit frees the name and one that committed keeps it
 *   (src/fleetlock/names.ts); the ledger refuses a commit too close to that end;
 * - the ledger then commits the server and enqueues its index row, token row, audit row and the
 *   confirmation of its FleetLock identity.
 * Lifecycle workflows (decommission and its cancel, token rotation, refresh) follow the same rule:
 * the server's ledger owns each fact and commits first; its outbox and cleanup timer bring the
 * index, the token row and the fleet's coordinator along.
 */
import { issueToken } from "../auth/tokens";
import { getDb, type Db } from "../db/client";
import { servers, specServerLabels } from "../db/schema";
import { and, eq } from "drizzle-orm";
import { DomainError, notFound, unknownFleet } from "../domain/errors";
import type { Env } from "../env";
import { visibleFleets, type Principal } from "../domain/principal";
import { FLEET_ID } from "../model/fleet";
import { MAX_SERVER_LABELS } from "../domain/limits";
import { getFleet } from "../fleets/store";
import { unwrap } from "../objects/kit/result";
import type { ServerView } from "../ledger/view";
import { RESERVATION_MARGIN_MS } from "../ledger/operator";
import type { ServerRecord } from "../model/server/record";
import type { DesiredConfigInput, DesiredConfigRequest } from "../model/server/schemas";
import { imageForFleet, policyOf } from "../images/resolve";
import { catalogSpread } from "../domain/images";
import { tagMatches, viewTag } from "../ledger/view-tag";
import { ledgerOf, coordinatorOf } from "../objects/stubs";
import { catchUpPlan, firstPlan, replanServer, setServerRoles } from "../planner/service";
import type { ServerPatch } from "./schemas";
import { mergeLabels, sortedLabels, type Labels } from "../model/server/labels";
import { refuseTakenHostname, serverIdOf } from "./naming";
import { hostnamesIn, listServers, sparseLabel, type ServerFilter, type ServerPageKey } from "./store";
import { viewWhenChanged } from "./wait";

export interface RegisterInput {
  fleet: string;
  hostname: string;
  kind: ServerRecord["kind"];
  roles: string[];
  /** Enrollment passes the body's labels (already validated by labelsSchema) or none. */
  labels?: Labels;
  reboot_group: string;
  fleetlock_id?: string;
}

/**
 * A server's first labels: its own (the request's, an enrollment's) with what a fleet spec
 * declares for its hostname merged over them (src/specs/spec-servers.ts: the spec named it before
 * it registered). Should the two together be more than a server may carry, the server keeps its
 * own: a spec never makes a registration fail (the next diff shows the difference).
 */
async function withDeclaredLabels(db: Db, fleet: string, hostname: string, own: Labels): Promise<Labels> {
  const [row] = await db
    .select({ labels: specServerLabels.labels })
    .from(specServerLabels)
    .where(and(eq(specServerLabels.fleetId, fleet), eq(specServerLabels.hostname, hostname)))
    .limit(1);
  if (!row) return sortedLabels(own);
  const merged = mergeLabels(own, row.labels);
  return Object.keys(merged).length > MAX_SERVER_LABELS ? sortedLabels(own) : merged;
}

export async function registerServer(
  env: Env,
  actor: string,
  input: RegisterInput,
  newId: () => string = () => crypto.randomUUID(),
): Promise<{ view: ServerView; token: string }> {
  const db = getDb(env.DB);
  const fleet = await getFleet(db, input.fleet);
  if (!fleet) throw unknownFleet(input.fleet);
  // Operators name servers by hostname: a second live one in the fleet would make that name
  // ambiguous. The index answers for servers registered before the fleet's coordinator kept
  // hostnames; the coordinator's reservation serializes registrations racing for one name.
  await refuseTakenHostname(db, fleet.id, input.hostname);
  const id = newId();
  const { until } = unwrap(
    await coordinatorOf(env, fleet.id).reserveRegistration(input.hostname, input.fleetlock_id ?? null, id),
  );
  // Deleted since it was read, its coordinator wiped before the reservation: nothing would keep the
  // server out but this (a deletion after the reservation is refused by the coordinator).
  if (!(await getFleet(db, fleet.id))) throw unknownFleet(input.fleet);
  const { token, hash } = await issueToken("server", id);
  const record: ServerRecord = {
    id,
    fleet_id: fleet.id,
    hostname: input.hostname.toLowerCase(),
    kind: input.kind,
    roles: input.roles,
    labels: await withDeclaredLabels(db, fleet.id, input.hostname.toLowerCase(), input.labels ?? {}),
    reboot_group: input.reboot_group,
    fleetlock_id: input.fleetlock_id ?? null,
    state: "provisioning",
    stale_after_s: fleet.staleAfterS,
    created_at: Date.now(),
    token_hash: hash,
    token_id: id,
  };
  // The first desired config is the plan: the server's roles, the fleet's capabilities and channels.
  const first = await firstPlan(env, fleet.id, record.roles);
  const ledger = ledgerOf(env, id);
  const deadline = commitDeadline(until);
  const { view: registered } = unwrap(
    await ledger.register(record, first.agents, { actor, details: input, plan_rev: first.rev, deadline }),
  );
  // An intent change that committed meanwhile could not mark this server (no index row yet).
  const caughtUp = await catchUpPlan(env, id, fleet.id, first.rev);
  return { view: caughtUp ?? registered, token };
}

/** Longer than any view tag (`W/"` and 11 base-36 digits) by far: a tag past it is not one of ours. */
const MAX_WAIT_TAG_LENGTH = 256;

/**
 * The server's view and its weak ETag; `view` is null while `known` (an If-None-Match) still
 * matches. With `waitS`, a single known tag waits (in the Worker, ./wait.ts) until the view changes
 * or the time is up; a list or `*` is answered at once. `signal`: the client hung up.
 */
export async function serverIfChanged(
  env: Env,
  id: string,
  known: string | undefined,
  waitS: number,
  signal?: AbortSignal,
): Promise<{ etag: string; view: ServerView | null }> {
  const ledger = ledgerOf(env, id);
  const given = known?.trim();
  // Only a tag that could be a view's waits (the ledger is handed it); a longer one matches nothing.
  if (given && waitS > 0 && !given.includes(",") && given !== "*" && given.length <= MAX_WAIT_TAG_LENGTH) {
    return viewWhenChanged(env, id, given.startsWith("W/") ? given : `W/${given}`, waitS * 1000, signal);
  }
  const view = await ledger.view();
  if (!view) throw notFound("server", id);
  const etag = viewTag(view);
  return { etag, view: tagMatches(known, etag) ? null : view };
}

/** A page of the fleet-wide index by hostname (one more row than `limit` when another page exists). */
export async function searchServers(env: Env, filter: ServerFilter, after: ServerPageKey | null, limit: number) {
  const db = getDb(env.DB);
  return listServers(db, { ...filter, driveFrom: await sparseLabel(db, filter.fleet, filter.labels) }, after, limit);
}

/** The hostnames of these servers (removed ones included), for answers that name servers. */
export async function hostnamesOf(env: Env, ids: string[]): Promise<Map<string, string>> {
  const unique = [...new Set(ids)].filter((id) => /^[0-9a-f-]{36}$/.test(id));
  if (unique.length === 0) return new Map();
  const rows = await hostnamesIn(getDb(env.DB), unique);
  return new Map(rows.map((r) => [r.id, r.hostname]));
}

/**
 * The id of the server a route was given: an id, a hostname or `fleet/hostname`, with `?fleet=`
 * (src/servers/naming.ts). Other features name servers through this too.
 */
export async function resolveServer(
  env: Env,
  principal: Principal,
  ref: string,
  fleet?: string,
  opts: { removedToo?: boolean } = {},
): Promise<string> {
  if (fleet !== undefined && !FLEET_ID.test(fleet))
    throw new DomainError("invalid_query", `fleet '${fleet}' is not a fleet id`);
  return serverIdOf(getDb(env.DB), ref, fleet, { ...opts, visible: visibleFleets(principal) });
}

export async function getDesiredConfig(env: Env, id: string) {
  const view = await ledgerOf(env, id).view();
  if (!view) throw notFound("server", id);
  return view.desired;
}

export async function putDesiredConfig(env: Env, actor: string, id: string, request: DesiredConfigRequest) {
  const input: DesiredConfigInput = { ...request, agents: await resolveAgents(env, id, request.agents) };
  return unwrap(await ledgerOf(env, id).putDesired(input, actor));
}

/**
 * PATCH /v1/servers/{id}: the reboot identity first (a taken fleetlock_id is refused before anything
 * is written), then the labels, then the roles (which re-plan the server). When labels come with
 * other fields, the merge's limit is checked first, so a refused label merge changes nothing either.
 */
export async function patchServer(env: Env, actor: string, id: string, patch: ServerPatch): Promise<ServerView> {
  const { roles, labels, ...identity } = patch;
  const changesIdentity = identity.fleetlock_id !== undefined || identity.reboot_group !== undefined;
  if (labels !== undefined && (changesIdentity || roles !== undefined)) await refuseLabelMerge(env, id, labels);
  let view: ServerView | null = null;
  if (changesIdentity) view = await patchServerIdentity(env, actor, id, identity);
  if (labels !== undefined) view = unwrap(await ledgerOf(env, id).setLabels(labels, { actor })).view;
  if (roles !== undefined) view = (await setServerRoles(env, actor, id, roles)).view;
  return view!;
}

/** The refusals setLabels would answer (no server, removed, over the limit), checked before a PATCH writes anything. */
async function refuseLabelMerge(env: Env, id: string, patch: Record<string, string | null>) {
  const current = await ledgerOf(env, id).view();
  if (!current) throw notFound("server", id);
  if (current.record.state === "removed") throw new DomainError("server_removed", "a removed server cannot be changed");
  const before = current.record.labels ?? {};
  const count = Object.keys(mergeLabels(before, patch)).length;
  if (count > MAX_SERVER_LABELS) {
    throw new DomainError("validation_failed", `the server would have ${count} labels; at most ${MAX_SERVER_LABELS}`, [
      { path: "labels", message: `at most ${MAX_SERVER_LABELS} labels (the server has ${Object.keys(before).length})` },
    ]);
  }
}

/** A ledger commits reserved names only while they are surely still held (src/ledger/operator.ts). */
function commitDeadline(...untils: (number | null)[]): number | undefined {
  const held = untils.filter((u): u is number => u !== null);
  return held.length ? Math.min(...held) - RESERVATION_MARGIN_MS : undefined;
}

async function patchServerIdentity(
  env: Env,
  actor: string,
  id: string,
  input: { fleetlock_id?: string | null; reboot_group?: string },
): Promise<ServerView> {
  const ledger = ledgerOf(env, id);
  const current = await ledger.view();
  if (!current) throw notFound("server", id);
  // Refused before reserving anything: a reservation for a PATCH that cannot land would hold the
  // id from other servers until it expired.
  if (current.record.state === "removed") throw new DomainError("server_removed", "a removed server cannot be changed");
  const before = { fleetlock_id: current.record.fleetlock_id, reboot_group: current.record.reboot_group };
  const after = {
    fleetlock_id: input.fleetlock_id === undefined ? before.fleetlock_id : input.fleetlock_id,
    reboot_group: input.reboot_group ?? before.reboot_group,
  };
  if (after.fleetlock_id === before.fleetlock_id && after.reboot_group === before.reboot_group) return current;
  // Any id given is reserved, even one this read says the server has: a concurrent PATCH may
  // have moved it on since (reserving an id the server owns costs nothing). And only the fields
  // given go to the ledger: the rest of `after` comes from this read, which a concurrent PATCH
  // may have made stale, and would undo an acknowledged change.
  const reserved = input.fleetlock_id
    ? unwrap(await coordinatorOf(env, current.record.fleet_id).reserveClientId(input.fleetlock_id, id))
    : null;
  const change = { fleetlock_id: input.fleetlock_id, reboot_group: input.reboot_group };
  const deadline = commitDeadline(reserved?.until ?? null);
  const result = unwrap(await ledger.setRebootIdentity(change, { actor, details: { before, after: input }, deadline }));
  return result.view;
}

// ---- lifecycle ----

/** Hands a pinned server back to the planner; it is re-planned at once. */
export const releaseServer = (env: Env, actor: string, id: string) =>
  replanServer(env, actor, id, { reason: "released", release: true });

export async function decommissionServer(env: Env, actor: string, id: string, opts: { force?: { reason: string } }) {
  return unwrap(await ledgerOf(env, id).decommission({ actor, force: opts.force }));
}

export async function cancelDecommission(env: Env, actor: string, id: string) {
  return unwrap(await ledgerOf(env, id).cancelDecommission(actor));
}

/**
 * A new token for the server, answered once; the old one stops working at once. Of rotations that
 * start from the same token, one commits and the others are refused (409 token_rotated), so no
 * caller is answered a token that is already dead.
 */
export async function rotateServerToken(env: Env, actor: string, id: string) {
  const ledger = ledgerOf(env, id);
  const replaces = await ledger.tokenHash();
  if (replaces === null) throw notFound("server", id);
  const { token, hash } = await issueToken("server", id);
  const out = unwrap(await ledger.rotateToken(hash, actor, replaces));
  return { view: out.view, token };
}

export async function refreshServer(env: Env, actor: string, id: string) {
  return unwrap(await ledgerOf(env, id).requestRefresh(actor));
}

/**
 * The agents of a desired config with their images resolved now, against the catalog and the
 * server's fleet's image policy: the ledger stores, and hands the host, exactly these.
 */
async function resolveAgents(
  env: Env,
  id: string,
  agents: DesiredConfigRequest["agents"],
): Promise<DesiredConfigInput["agents"]> {
  const db = getDb(env.DB);
  const row = await db.query.servers.findFirst({ columns: { fleetId: true }, where: eq(servers.id, id) });
  if (!row) throw notFound("server", id);
  const policy = await policyOf(db, row.fleetId);
  return Promise.all(
    agents.map(async (a) => {
      const { image, version, catalog } = await imageForFleet(
        db,
        row.fleetId,
        "image_id" in a ? { image_id: a.image_id } : a,
        policy,
      );
      return {
        name: a.name,
        image,
        version,
        ...(a.instance_id ? { instance_id: a.instance_id } : {}),
        ...catalogSpread(catalog),
      };
    }),
  );
}
