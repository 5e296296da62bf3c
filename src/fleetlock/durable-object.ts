import { DurableObject } from "cloudflare:workers";
import { and, eq, ne } from "drizzle-orm";
import { audit } from "../audit/log";
import { getDb } from "../db/client";
import { servers } from "../db/schema";
import type { Env } from "../env";
import { digestsEqual } from "../lib/crypto";
import { failure, type ClientParams, type FleetLockFailure } from "./protocol";
import {
  configure,
  holderOf,
  newGroup,
  release,
  releaseWhere,
  renameHolder,
  type GroupChange,
  type GroupState,
  type Holder,
} from "./semaphore";
import { groupView, type GroupView } from "./views";
import {
  admit,
  claim,
  closedBecause,
  dequeue,
  drain,
  nextWake,
  queuedOf,
  refusalValue,
  releaseUnclaimed,
  type Queue,
  type QueueEntry,
} from "./queue";
import { Waiters } from "./waiters";

/** The fleet's settings the coordinator needs, pushed from D1 by every operator call. */
export interface FleetSettings {
  fleet_id: string;
  lock_ttl_s: number;
  allow_unknown_ids: boolean;
  default_group_slots: number | null;
}

interface FleetConfig extends FleetSettings {
  /** SHA-256 of the current FleetLock key; null until an admin creates one. */
  key_hash: string | null;
}

/** What a registered FleetLock id belongs to. */
interface ClientEntry {
  server_id: string;
  hostname: string;
  reboot_group: string;
}

/** A server's FleetLock identity; `rev` orders pushes so a late, older one cannot win. */
export interface ServerIdentity {
  fleetlock_id: string | null;
  hostname: string;
  reboot_group: string;
  rev: number;
}

export type CoordinatorFailure = { ok: false; status: 404; code: string; message: string };

const KEY = {
  config: "config",
  group: (name: string) => `group:${name}`,
  client: (id: string) => `client:${id}`,
  server: (id: string) => `server:${id}`,
  // Group names cannot hold ':', so the first ':' after the group ends it.
  queued: (group: string, id: string) => `queue:${group}:${id}`,
} as const;

/** How a pre-reboot is asked: `ticket` names the waiting connection; `resume` re-attaches after a restart without parking anew. */
export interface PreRebootOptions {
  ticket?: string;
  resume?: boolean;
}

/** Identities learned from D1 rank below any pushed one. */
const REV_FROM_INDEX = -1;
const UNKNOWN_CACHE_MS = 60_000;
const UNKNOWN_CACHE_MAX = 10_000;

/**
 * One per fleet: a counting semaphore per reboot group. Storage is the synchronous KV API, so
 * every RPC's read-check-write runs in one turn that no other request can interleave with, and
 * the output gate holds each reply until its write is durable. The only await on the host path
 * is the D1 look-up for an id missing from the registry; the semaphore is read after it.
 */
export class RebootCoordinator extends DurableObject<Env> {
  private get kv() {
    return this.ctx.storage.kv;
  }

  /**
   * Config and groups (a handful of small objects) mirrored in memory, so the host path reads no
   * storage but the client registry. Storage is written first and memory after, and this object
   * is the only writer, so the mirror cannot drift; it is rebuilt whenever the object wakes.
   */
  private mem: {
    config: FleetConfig | null;
    groups: Map<string, GroupState>;
    heldIn: Map<string, string>;
    /** Parked hosts per group, FIFO; each entry is its own storage key. */
    queues: Map<string, Queue>;
  } | null = null;

  /** The parked requests still connected (queue entries are durable, connections are not). */
  private waiters = new Waiters();

  /** The clock every grant, window and wait is decided with; tests move it. */
  clock = () => Date.now();

  private get m() {
    if (!this.mem) {
      const groups = new Map<string, GroupState>();
      const heldIn = new Map<string, string>();
      for (const [key, group] of this.kv.list<GroupState>({ prefix: "group:" })) {
        const name = key.slice("group:".length);
        groups.set(name, group);
        for (const h of group.holders) heldIn.set(h.id, name);
      }
      const queues = new Map<string, QueueEntry[]>();
      for (const [key, entry] of this.kv.list<QueueEntry>({ prefix: "queue:" })) {
        const name = key.slice("queue:".length, key.indexOf(":", "queue:".length));
        queues.set(name, [...(queues.get(name) ?? []), entry]);
      }
      for (const q of queues.values()) q.sort((a, b) => a.since - b.since || a.seq - b.seq);
      this.mem = { config: this.kv.get<FleetConfig>(KEY.config) ?? null, groups, heldIn, queues };
    }
    return this.mem;
  }

  private putConfig(config: FleetConfig) {
    this.kv.put(KEY.config, config);
    this.m.config = config;
  }

  // ---- host path (FleetLock) ----

  async preReboot(keyHash: string, params: ClientParams, opts: PreRebootOptions = {}): Promise<{ ok: true } | FleetLockFailure> {
    const config = this.authorized(keyHash);
    if (!config) return failure("unauthorized", "invalid FleetLock key for this fleet");
    const client = await this.client(config, params.id);
    if (!client.ok) return client;
    // The look-up may have awaited D1: a key rotated meanwhile refuses this request too.
    if (!this.authorized(keyHash)) return failure("unauthorized", "invalid FleetLock key for this fleet");
    if (client.entry && client.entry.reboot_group !== params.group) {
      return failure(
        "group_mismatch",
        `client '${params.id}' is registered in reboot group '${client.entry.reboot_group}', not '${params.group}'`,
      );
    }
    // From here on, no await until parking: the check and the grant are one uninterrupted turn.
    const now = this.clock();
    // An id holds at most one slot in the fleet; holding one anywhere makes this a recursive lock
    // (and claims a slot granted while the host could not be answered).
    const heldIn = this.m.heldIn.get(params.id);
    if (heldIn) {
      this.saveGroup(heldIn, claim(this.m.groups.get(heldIn)!, params.id, now));
      return { ok: true };
    }
    const name = params.group;
    const group = this.m.groups.get(name) ?? this.implicitGroup(config, now);
    if (!group) return failure("unknown_group", `reboot group '${name}' is not configured for this fleet`);
    const adm = admit(group, this.m.queues.get(name) ?? [], params.id, client.entry?.server_id ?? null, now, {
      mayPark: !opts.resume,
    });
    if (adm.kind === "refused") return failure(adm.refusal, adm.value);
    if (adm.kind === "granted") {
      if (adm.changed) this.saveGroup(name, adm.group);
      return { ok: true };
    }
    if (!this.m.groups.has(name)) this.saveGroup(name, group);
    this.saveQueue(name, adm.queue);
    const outcome = this.waiters.wait(params.id, name, opts.ticket ?? crypto.randomUUID(), adm.entry.deadline - now, () =>
      this.expire(name, params.id),
    );
    // A slot may be free and open with nobody answered yet (a window just opened): settle it now.
    this.drainGroup(name);
    if ((await outcome).granted) return { ok: true };
    const after = this.m.groups.get(name)!;
    if (holderOf(after, params.id)) return { ok: true };
    const refusal = closedBecause(after, this.clock()) ?? "semaphore_full";
    return failure(refusal, `${refusalValue[refusal]}; waited ${after.queue_wait_s ?? 0} s in the queue`);
  }

  /** The edge saw the parked request's client go away: it stops waiting and keeps its place. */
  async leave(id: string, ticket: string): Promise<{ left: boolean }> {
    return { left: this.waiters.leave(id, ticket) };
  }

  /**
   * UnlockIfHeld, for whichever group holds the id: a host whose group changed while it held a
   * slot must still be able to reach steady state. Succeeds whether or not anything was held.
   */
  async steadyState(keyHash: string, params: ClientParams): Promise<{ ok: true; released: boolean } | FleetLockFailure> {
    const config = this.authorized(keyHash);
    if (!config) return failure("unauthorized", "invalid FleetLock key for this fleet");
    if (!this.m.heldIn.has(params.id)) {
      const client = await this.client(config, params.id);
      if (!client.ok) return client;
    }
    // Re-read after the possible await: another request may have granted or released meanwhile.
    const groupName = this.m.heldIn.get(params.id);
    if (!groupName) {
      // A host at steady state is not waiting to reboot: it gives up its place, if it had one.
      for (const [name, q] of [...this.m.queues]) {
        if (!queuedOf(q, params.id)) continue;
        this.saveQueue(name, dequeue(q, params.id));
        this.waiters.settle(params.id, { granted: false, group: name });
      }
      return { ok: true, released: false };
    }
    const next = release(this.m.groups.get(groupName)!, params.id, this.clock());
    this.saveGroup(groupName, next.group);
    this.drainGroup(groupName);
    return { ok: true, released: next.released !== null };
  }

  // ---- fleet configuration ----

  /** Installs a new key; the previous one stops working with this write. */
  async setKey(settings: FleetSettings, keyHash: string): Promise<void> {
    this.putConfig({ ...settings, key_hash: keyHash });
  }

  /** Records (or replaces) a server's FleetLock identity; older revisions are ignored. */
  async setServerIdentity(serverId: string, identity: ServerIdentity): Promise<{ applied: boolean }> {
    return { applied: this.applyIdentity(serverId, identity) };
  }

  async putGroup(settings: FleetSettings, name: string, change: GroupChange): Promise<GroupView> {
    const config = this.syncSettings(settings);
    const now = this.clock();
    const after = configure(this.m.groups.get(name) ?? null, change, now);
    this.saveGroup(name, after);
    // More slots, unpaused or new windows: parked hosts get what is free now.
    this.drainGroup(name);
    return this.view(config, name, this.m.groups.get(name)!, now);
  }

  async getGroup(settings: FleetSettings, name: string): Promise<{ ok: true; group: GroupView } | CoordinatorFailure> {
    const config = this.syncSettings(settings);
    const group = this.m.groups.get(name);
    if (!group) return { ok: false, status: 404, code: "not_found", message: `reboot group '${name}' is not configured` };
    return { ok: true, group: this.view(config, name, group, this.clock()) };
  }

  async listGroups(settings: FleetSettings): Promise<GroupView[]> {
    const config = this.syncSettings(settings);
    const now = this.clock();
    const out: GroupView[] = [];
    for (const [name, group] of this.m.groups) out.push(this.view(config, name, group, now));
    return out;
  }

  // ---- releases ----

  /** An operator's force release of one holder. */
  async forceRelease(
    settings: FleetSettings,
    name: string,
    id: string,
  ): Promise<{ ok: true; released: Holder; group: GroupView } | CoordinatorFailure> {
    const config = this.syncSettings(settings);
    const group = this.m.groups.get(name);
    if (!group) return { ok: false, status: 404, code: "not_found", message: `reboot group '${name}' is not configured` };
    const now = this.clock();
    const next = release(group, id, now);
    if (!next.released) {
      return { ok: false, status: 404, code: "not_held", message: `'${id}' holds no slot in reboot group '${name}'` };
    }
    this.saveGroup(name, next.group);
    this.drainGroup(name);
    return { ok: true, released: next.released, group: this.view(config, name, this.m.groups.get(name)!, now) };
  }

  /**
   * Releases every slot held for a server: it rebooted and came back (new boot_id) without its
   * steady-state call getting through, or it was removed. Audited here, so every caller is.
   */
  async releaseServer(
    serverId: string,
    opts: { reason: string; actor: string; granted_before?: number },
  ): Promise<(Holder & { group: string })[]> {
    const match = (h: Holder) => h.server_id === serverId && (opts.granted_before === undefined || h.granted_at <= opts.granted_before);
    const now = this.clock();
    const released: (Holder & { group: string })[] = [];
    for (const [name, group] of [...this.m.groups]) {
      const next = releaseWhere(group, match, now);
      if (next.released.length === 0) continue;
      this.saveGroup(name, next.group);
      this.drainGroup(name);
      released.push(...next.released.map((h) => ({ ...h, group: name })));
    }
    if (released.length > 0) {
      await audit(getDb(this.env.DB), {
        actor: opts.actor,
        action: "fleetlock.release_server",
        target: `server:${serverId}`,
        details: { server_id: serverId, reason: opts.reason, released: released.map((h) => ({ group: h.group, id: h.id })) },
      });
    }
    return released;
  }

  // ---- the queue's timers ----

  /** Unclaimed grants running out, waits ending, windows opening: whatever is due now. */
  async alarm(): Promise<void> {
    this.armedAt = null;
    for (const name of [...this.m.groups.keys()]) this.drainGroup(name);
    this.arm();
  }

  private armedAt: number | null = null;

  /** One alarm at the earliest moment any group needs a look without a request to prompt it. */
  private arm() {
    let at = Infinity;
    const now = this.clock();
    for (const [name, g] of this.m.groups) at = Math.min(at, nextWake(g, this.m.queues.get(name) ?? [], now) ?? Infinity);
    if (at === Infinity || at === this.armedAt) return;
    this.armedAt = at;
    // The alarm runs on real time; the clock may be moved (tests), so convert the distance.
    void this.ctx.storage.setAlarm(Date.now() + Math.max(0, at - now));
  }

  /**
   * Frees what is due in a group (unclaimed grants past their bound), then hands free slots to
   * parked hosts in FIFO order; hosts still connected are answered 200 after the grant is stored
   * (the output gate holds every reply until the write is durable).
   */
  private drainGroup(name: string) {
    const g = this.m.groups.get(name);
    if (!g) return;
    const now = this.clock();
    const freed = releaseUnclaimed(g, now);
    const d = drain(freed.group, this.m.queues.get(name) ?? [], now, (id) => this.waiters.has(id), (id) => {
      const held = this.m.heldIn.get(id);
      return held !== undefined && held !== name;
    });
    this.saveGroup(name, d.group);
    this.saveQueue(name, d.queue);
    for (const { entry, answerable } of d.granted) if (answerable) this.waiters.settle(entry.id, { granted: true });
    this.arm();
  }

  /** A parked host's wait ran out: it leaves the queue and is answered with the group's refusal. */
  private expire(name: string, id: string) {
    const q = this.m.queues.get(name) ?? [];
    this.saveQueue(name, dequeue(q, id));
    this.waiters.settle(id, { granted: false, group: name });
    this.arm();
  }

  /** Stores a queue's added and removed entries, then mirrors it in memory. */
  private saveQueue(name: string, after: Queue) {
    const before = this.m.queues.get(name) ?? [];
    if (before === after) return;
    const now = new Set(after.map((e) => e.id));
    const was = new Set(before.map((e) => e.id));
    for (const e of before) if (!now.has(e.id)) this.kv.delete(KEY.queued(name, e.id));
    for (const e of after) if (!was.has(e.id)) this.kv.put(KEY.queued(name, e.id), e);
    if (after.length) this.m.queues.set(name, after);
    else this.m.queues.delete(name);
  }

  // ---- internals ----

  private authorized(keyHash: string): FleetConfig | null {
    const config = this.m.config;
    return config?.key_hash && digestsEqual(config.key_hash, keyHash) ? config : null;
  }

  /** Keeps the stored settings equal to D1's, preserving the key. */
  private syncSettings(settings: FleetSettings): FleetConfig {
    const current = this.m.config;
    const next: FleetConfig = { ...settings, key_hash: current?.key_hash ?? null };
    if (
      !current ||
      current.lock_ttl_s !== next.lock_ttl_s ||
      current.allow_unknown_ids !== next.allow_unknown_ids ||
      current.default_group_slots !== next.default_group_slots ||
      current.fleet_id !== next.fleet_id
    ) {
      this.putConfig(next);
    }
    return next;
  }

  /** A group the fleet creates on first use, when it has a default slot count. */
  private implicitGroup(config: FleetConfig, now: number): GroupState | null {
    return config.default_group_slots ? newGroup(config.default_group_slots, now) : null;
  }

  /**
   * The registry entry for an id. A miss is looked up in D1 once (a push at registration may
   * have failed) and cached; only ids no server has registered are refused, unless allowed.
   */
  private async client(
    config: FleetConfig,
    id: string,
  ): Promise<{ ok: true; entry: ClientEntry | null } | FleetLockFailure> {
    let entry = this.kv.get<ClientEntry>(KEY.client(id)) ?? null;
    if (!entry && !this.recentlyUnknown(id)) {
      const row = await getDb(this.env.DB).query.servers.findFirst({
        columns: { id: true, hostname: true, rebootGroup: true },
        where: and(eq(servers.fleetId, config.fleet_id), eq(servers.fleetlockId, id), ne(servers.state, "removed")),
      });
      if (row) {
        this.applyIdentity(row.id, { fleetlock_id: id, hostname: row.hostname, reboot_group: row.rebootGroup, rev: REV_FROM_INDEX });
        entry = this.kv.get<ClientEntry>(KEY.client(id)) ?? null;
      } else {
        this.rememberUnknown(id);
      }
    }
    if (entry || config.allow_unknown_ids) return { ok: true, entry };
    return failure("unknown_client", `no server of this fleet is registered with fleetlock_id '${id}'`);
  }

  /**
   * Ids D1 did not know, for a short while: strangers (and every request of a fleet that allows
   * unknown ids) must not cost a D1 read each. A push for the id clears its entry at once.
   */
  private unknown = new Map<string, number>();

  private recentlyUnknown(id: string) {
    const until = this.unknown.get(id);
    if (until === undefined) return false;
    if (until > Date.now()) return true;
    this.unknown.delete(id);
    return false;
  }

  private rememberUnknown(id: string) {
    if (this.unknown.size >= UNKNOWN_CACHE_MAX) this.unknown.clear();
    this.unknown.set(id, Date.now() + UNKNOWN_CACHE_MS);
  }

  private applyIdentity(serverId: string, identity: ServerIdentity): boolean {
    if (identity.fleetlock_id) this.unknown.delete(identity.fleetlock_id);
    const previous = this.kv.get<ServerIdentity>(KEY.server(serverId));
    if (previous && previous.rev > identity.rev) return false;
    const oldId = previous?.fleetlock_id ?? null;
    if (oldId && oldId !== identity.fleetlock_id) {
      if (this.kv.get<ClientEntry>(KEY.client(oldId))?.server_id === serverId) this.kv.delete(KEY.client(oldId));
      // The slot follows the server to its new id, so the new id's steady-state releases it.
      const heldIn = this.m.heldIn.get(oldId);
      if (heldIn && identity.fleetlock_id) {
        this.saveGroup(heldIn, renameHolder(this.m.groups.get(heldIn)!, oldId, identity.fleetlock_id, Date.now()));
      }
    }
    if (identity.fleetlock_id) {
      this.kv.put(KEY.client(identity.fleetlock_id), {
        server_id: serverId,
        hostname: identity.hostname,
        reboot_group: identity.reboot_group,
      } satisfies ClientEntry);
    }
    this.kv.put(KEY.server(serverId), identity);
    return true;
  }

  /** Stores a group, then mirrors it and its holders' index in memory. */
  private saveGroup(name: string, after: GroupState) {
    const before = this.m.groups.get(name);
    if (before === after) return;
    this.kv.put(KEY.group(name), after);
    this.m.groups.set(name, after);
    const is = new Set(after.holders.map((h) => h.id));
    for (const h of before?.holders ?? []) if (!is.has(h.id)) this.m.heldIn.delete(h.id);
    for (const id of is) this.m.heldIn.set(id, name);
  }

  private view(config: FleetConfig, name: string, group: GroupState, now: number): GroupView {
    const queue = { entries: this.m.queues.get(name) ?? [], connected: (id: string) => this.waiters.has(id) };
    return groupView(name, group, queue, now, config.lock_ttl_s * 1000, (serverId) => {
      const s = this.kv.get<ServerIdentity>(KEY.server(serverId));
      return s ? { id: serverId, hostname: s.hostname } : { id: serverId, hostname: null };
    });
  }
}
