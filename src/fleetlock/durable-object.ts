import { DurableObject } from "cloudflare:workers";
import { auditEvent, auditInsertOnce, type AuditEntry, type AuditEvent } from "../audit/log";
import { getDb } from "../db/client";
import type { Env } from "../env";
import { digestsEqual } from "../lib/crypto";
import { Outbox } from "../objects/kit/outbox";
import { fail, type Failure } from "../objects/kit/result";
import { Scheduler } from "../objects/kit/scheduler";
import { failure, type ClientParams, type FleetLockFailure } from "./protocol";
import {
  acquire,
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

/** A fleetlock_id held for a registration or PATCH until the server's ledger confirms it. */
interface Reservation {
  server_id: string;
  until: number;
}

const KEY = {
  config: "config",
  group: (name: string) => `group:${name}`,
  client: (id: string) => `client:${id}`,
  server: (id: string) => `server:${id}`,
  reservation: (id: string) => `reservation:${id}`,
  // Group names cannot hold ':', so the first ':' after the group ends it.
  queued: (group: string, id: string) => `queue:${group}:${id}`,
} as const;

/** The scheduler's timer for the queue: unclaimed grants running out, waits ending, windows opening. */
const QUEUE_TIMER = "queue";

/** How a pre-reboot is asked: `ticket` names the waiting connection; `resume` re-attaches after a restart without parking anew. */
export interface PreRebootOptions {
  ticket?: string;
  resume?: boolean;
}

/**
 * How long a reserved fleetlock_id waits for its ledger's confirmation. A workflow that died
 * between reserving and committing leaves nothing taken for longer than this.
 */
export const RESERVATION_TTL_MS = 2 * 60_000;

/** How long a host grant's or release's audit row may wait to share a D1 batch with others. */
export const HOST_AUDIT_DEFER_MS = 1_000;

/**
 * One per fleet: a counting semaphore per reboot group. Storage is the synchronous KV API, so
 * every RPC's read-check-write runs in one turn that no other request can interleave with, and
 * the output gate holds each reply until its write is durable. The only await on the host path
 * is the D1 look-up for an id missing from the registry; the semaphore is read after it.
 */
export class RebootCoordinator extends DurableObject<Env> {
  private readonly scheduler: Scheduler;
  private readonly outbox: Outbox<"audit">;

  constructor(ctx: DurableObjectState, env: Env) {
    super(ctx, env);
    this.scheduler = new Scheduler(ctx.storage);
    const db = () => getDb(this.env.DB);
    this.outbox = new Outbox(
      ctx.storage,
      this.scheduler,
      { audit: { target: "d1", statements: (e: AuditEvent) => [auditInsertOnce(db(), e)] } },
      db,
    );
  }

  async alarm() {
    await this.scheduler.fire({
      outbox: () => this.outbox.flush(),
      reservation: (payload, name) => this.expireReservation(name.slice("reservation:".length), (payload as { until: number }).until),
      [QUEUE_TIMER]: () => this.drainAll(),
    });
  }

  /** Audit rows leave through the outbox: the caller's answer never waits for D1. */
  private async audited(entries: AuditEntry[], opts: { wait: boolean }) {
    // Hosts' grants and releases are audited within HOST_AUDIT_DEFER_MS, many rows to one D1
    // batch, instead of one batch each; an operator's change is delivered before its answer.
    for (const e of entries) this.outbox.enqueue("audit", auditEvent(e), opts.wait ? {} : { deferMs: HOST_AUDIT_DEFER_MS });
    if (entries.length) await this.scheduler.arm();
    if (opts.wait) await this.outbox.flush();
  }

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
    const client = this.client(config, params.id);
    if (!client.ok) return client;
    if (client.entry && client.entry.reboot_group !== params.group) {
      return failure(
        "group_mismatch",
        `client '${params.id}' is registered in reboot group '${client.entry.reboot_group}', not '${params.group}'`,
      );
    }
    // From here on, no await until the grant or the park is stored: one uninterrupted turn.
    const now = this.clock();
    const serverId = client.entry?.server_id ?? null;
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
    const adm = admit(group, this.m.queues.get(name) ?? [], params.id, serverId, now, { mayPark: !opts.resume });
    if (adm.kind === "refused") return failure(adm.refusal, adm.value);
    if (adm.kind === "granted") {
      if (adm.changed) {
        this.saveGroup(name, adm.group);
        await this.audited([this.hostAudit("fleetlock.grant", params.id, serverId, { group: name })], { wait: false });
      }
      return { ok: true };
    }
    if (!this.m.groups.has(name)) this.saveGroup(name, group);
    this.saveQueue(name, adm.queue);
    const outcome = this.waiters.wait(params.id, name, opts.ticket ?? crypto.randomUUID(), adm.entry.deadline - now, () =>
      this.expire(name, params.id),
    );
    // A slot may be free and open with nobody answered yet (a window just opened): settle it now.
    await this.drainGroup(name);
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

  private hostAudit(action: string, id: string, serverId: string | null, details: Record<string, unknown>): AuditEntry {
    return {
      actor: serverId ? `server:${serverId}` : `fleetlock:${id}`,
      action,
      target: `fleet:${this.m.config?.fleet_id ?? "?"}`,
      details: { id, server_id: serverId, ...details },
    };
  }

  /**
   * UnlockIfHeld, for whichever group holds the id: a host whose group changed while it held a
   * slot must still be able to reach steady state. Succeeds whether or not anything was held.
   */
  async steadyState(keyHash: string, params: ClientParams): Promise<{ ok: true; released: boolean } | FleetLockFailure> {
    const config = this.authorized(keyHash);
    if (!config) return failure("unauthorized", "invalid FleetLock key for this fleet");
    const groupName = this.m.heldIn.get(params.id);
    if (!groupName) {
      const client = this.client(config, params.id);
      if (!client.ok) return client;
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
    // Both start in this turn (audit enqueued, then the freed slot granted): the parked host's
    // answer waits for nothing but the grant's write.
    const audited = next.released
      ? this.audited([this.hostAudit("fleetlock.release", params.id, next.released.server_id, { group: groupName })], { wait: false })
      : undefined;
    await Promise.all([audited, this.drainGroup(groupName)]);
    return { ok: true, released: next.released !== null };
  }

  // ---- fleet configuration ----

  /** The fleet was deleted (issue 8): its groups, holders, registry and key go. Idempotent. */
  async forget(): Promise<void> {
    // Audit rows still queued are delivered first; a failure here leaves everything for a retry.
    await this.outbox.flush();
    if (this.outbox.pending() > 0) throw new Error("audit rows still pending; retry the wipe later");
    await this.ctx.storage.deleteAlarm();
    await this.ctx.storage.deleteAll();
    this.mem = null;
  }

  /** PATCH /v1/fleets/{fleet} (issue 8): the fleet's settings, as D1 now holds them. */
  async updateSettings(settings: FleetSettings): Promise<void> {
    this.syncSettings(settings);
  }

  /** Installs a new key; the previous one stops working with this write. */
  async setKey(settings: FleetSettings, keyHash: string, actor: string): Promise<void> {
    this.putConfig({ ...settings, key_hash: keyHash });
    await this.audited([{ actor, action: "fleet.fleetlock_key.rotate", target: `fleet:${settings.fleet_id}` }], { wait: true });
  }

  /**
   * Holds `fleetlock_id` for `serverId` until its ledger confirms it (setServerIdentity) or the
   * reservation expires. Refused while another server has the id, registered or reserved: this
   * coordinator is where fleetlock_id uniqueness lives.
   */
  async reserveClientId(fleetlockId: string, serverId: string): Promise<{ ok: true } | Failure> {
    const owner = this.kv.get<ClientEntry>(KEY.client(fleetlockId));
    const now = Date.now();
    const reserved = this.kv.get<Reservation>(KEY.reservation(fleetlockId));
    const taken =
      (owner && owner.server_id !== serverId) || (reserved && reserved.server_id !== serverId && reserved.until > now);
    if (taken) return fail("fleetlock_id_taken", `another server of this fleet uses fleetlock_id '${fleetlockId}'`);
    if (!owner) {
      const until = now + RESERVATION_TTL_MS;
      this.kv.put(KEY.reservation(fleetlockId), { server_id: serverId, until } satisfies Reservation);
      this.scheduler.schedule(KEY.reservation(fleetlockId), until, { until });
      await this.scheduler.arm();
    }
    return { ok: true };
  }

  /** The timer carries the reservation it was set for: a later reservation of the id outlives it. */
  private expireReservation(fleetlockId: string, until: number) {
    const r = this.kv.get<Reservation>(KEY.reservation(fleetlockId));
    if (r && r.until <= until) this.kv.delete(KEY.reservation(fleetlockId));
  }

  /**
   * Records (or replaces) a server's FleetLock identity, delivered from its ledger's outbox; older
   * revisions are ignored, so redeliveries and reordered deliveries change nothing. An id that
   * another server registered meanwhile stays with that server (audited as a conflict).
   */
  async setServerIdentity(serverId: string, identity: ServerIdentity): Promise<{ applied: boolean; conflict?: boolean }> {
    const id = identity.fleetlock_id;
    const owner = id ? this.kv.get<ClientEntry>(KEY.client(id)) : undefined;
    const previous = this.kv.get<ServerIdentity>(KEY.server(serverId));
    if (id && owner && owner.server_id !== serverId && !(previous && previous.rev >= identity.rev)) {
      await this.audited(
        [{
          actor: `server:${serverId}`,
          action: "fleetlock.identity_conflict",
          target: `server:${serverId}`,
          details: { fleetlock_id: id, held_by: owner.server_id },
        }],
        { wait: false },
      );
      return { applied: false, conflict: true };
    }
    return { applied: this.applyIdentity(serverId, identity) };
  }

  /**
   * An identity read from the index by an upgrade step: taken only if this coordinator knows
   * nothing of the server and nobody else has the id, so it never overrides a ledger's delivery.
   */
  async adoptIdentity(serverId: string, identity: ServerIdentity): Promise<{ applied: boolean }> {
    if (this.kv.get<ServerIdentity>(KEY.server(serverId))) return { applied: false };
    const id = identity.fleetlock_id;
    if (!id || this.kv.get<ClientEntry>(KEY.client(id))) return { applied: false };
    return { applied: this.applyIdentity(serverId, { ...identity, rev: -1 }) };
  }

  async putGroup(settings: FleetSettings, name: string, change: GroupChange, actor: string): Promise<GroupView> {
    const config = this.syncSettings(settings);
    const now = this.clock();
    const after = configure(this.m.groups.get(name) ?? null, change, now);
    this.saveGroup(name, after);
    const audited = this.audited(
      [{ actor, action: "reboot_group.put", target: `fleet:${settings.fleet_id}`, details: { group: name, ...change } }],
      { wait: true },
    );
    // More slots, unpaused or new windows: parked hosts get what is free now, not after D1.
    await Promise.all([audited, this.drainGroup(name)]);
    return this.view(config, name, this.m.groups.get(name)!, now);
  }

  async getGroup(settings: FleetSettings, name: string): Promise<{ ok: true; group: GroupView } | Failure> {
    const config = this.syncSettings(settings);
    const group = this.m.groups.get(name);
    if (!group) return fail("not_found", `reboot group '${name}' is not configured`);
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
    actor: string,
  ): Promise<{ ok: true; released: Holder; group: GroupView } | Failure> {
    const config = this.syncSettings(settings);
    const group = this.m.groups.get(name);
    if (!group) return fail("not_found", `reboot group '${name}' is not configured`);
    const now = this.clock();
    const next = release(group, id, now);
    if (!next.released) return fail("not_held", `'${id}' holds no slot in reboot group '${name}'`);
    this.saveGroup(name, next.group);
    const r = next.released;
    const audited = this.audited(
      [{
        actor,
        action: "reboot_group.force_release",
        target: `fleet:${settings.fleet_id}`,
        details: { group: name, id: r.id, server_id: r.server_id, granted_at: new Date(r.granted_at).toISOString() },
      }],
      { wait: true },
    );
    // The freed slot goes to the first parked host now, not after the audit row reached D1.
    await Promise.all([audited, this.drainGroup(name)]);
    return { ok: true, released: r, group: this.view(config, name, this.m.groups.get(name)!, now) };
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
      released.push(...next.released.map((h) => ({ ...h, group: name })));
    }
    for (const name of new Set(released.map((h) => h.group))) await this.drainGroup(name);
    if (released.length > 0) {
      await this.audited(
        [{
          actor: opts.actor,
          action: "fleetlock.release_server",
          target: `server:${serverId}`,
          details: { server_id: serverId, reason: opts.reason, released: released.map((h) => ({ group: h.group, id: h.id })) },
        }],
        // Called from a ledger's outbox, never on a host's path: deliver before answering.
        { wait: true },
      );
    }
    return released;
  }

  // ---- rollout slots (issue 9) --------------------------------------------------------------
  // A rollout with reboot_slot takes a slot of the target server's group under the holder id
  // `rollout:<rollout id>:<server id>`: the same semaphore Zincati's FleetLock takes, so the two
  // together never exceed the group's slots. Kept in one block.

  /**
   * Recursive like pre-reboot: a holder that already has its slot gets it again, so a redelivered
   * request grants nothing twice. Refusals carry the FleetLock kinds (full, paused, outside window,
   * unknown group).
   */
  async acquireRolloutSlot(
    settings: FleetSettings,
    req: { holder: string; server_id: string; group: string; rollout_id: string },
  ): Promise<{ ok: true } | { ok: false; kind: string; value: string }> {
    const config = this.syncSettings(settings);
    if (this.m.heldIn.has(req.holder)) return { ok: true };
    const now = this.clock();
    const group = this.m.groups.get(req.group) ?? this.implicitGroup(config, now);
    if (!group) return { ok: false, kind: "unknown_group", value: `reboot group '${req.group}' is not configured for this fleet` };
    // Hosts parked in the group's FIFO queue go first: a rollout never takes a slot past them.
    if ((this.m.queues.get(req.group) ?? []).length > 0) {
      return { ok: false, kind: "semaphore_full", value: "hosts are queued for this group's slots" };
    }
    const result = acquire(group, req.holder, req.server_id, now);
    if (!result.ok) return { ok: false, kind: result.kind, value: result.value };
    if (result.changed) {
      this.saveGroup(req.group, result.group);
      await this.audited(
        [{ actor: `rollout:${req.rollout_id}`, action: "fleetlock.grant", target: `fleet:${settings.fleet_id}`, details: { id: req.holder, server_id: req.server_id, group: req.group } }],
        { wait: false },
      );
    }
    return { ok: true };
  }

  /** Releases a rollout target's slot if held; releasing nothing succeeds. */
  async releaseRolloutSlot(holder: string, rolloutId: string): Promise<{ ok: true; released: boolean }> {
    const groupName = this.m.heldIn.get(holder);
    if (!groupName) return { ok: true, released: false };
    const next = release(this.m.groups.get(groupName)!, holder, this.clock());
    this.saveGroup(groupName, next.group);
    const audited = next.released
      ? this.audited(
          [{ actor: `rollout:${rolloutId}`, action: "fleetlock.release", target: `fleet:${this.m.config?.fleet_id ?? "?"}`, details: { id: holder, server_id: next.released.server_id, group: groupName } }],
          { wait: false },
        )
      : undefined;
    // The freed slot goes to the first host parked in the group's queue, if any.
    await Promise.all([audited, this.drainGroup(groupName)]);
    return { ok: true, released: next.released !== null };
  }

  // ---- end of rollout slots -------------------------------------------------------------------

  // ---- the queue ----

  private async drainAll() {
    for (const name of [...this.m.groups.keys()]) await this.drainGroup(name);
  }

  /**
   * Frees what is due in a group (unclaimed grants past their bound), then hands free slots to
   * parked hosts in FIFO order; hosts still connected are answered 200, and the output gate holds
   * each answer until the grant is durable. Grants and releases are audited like any other.
   */
  private async drainGroup(name: string) {
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
    const rearm = this.armQueue(now);
    const audits = [
      ...freed.released.map((h) => this.hostAudit("fleetlock.release_unclaimed", h.id, h.server_id, { group: name })),
      ...d.granted.map(({ entry, answerable }) =>
        this.hostAudit("fleetlock.grant", entry.id, entry.server_id, { group: name, queued_since: new Date(entry.since).toISOString(), answered: answerable }),
      ),
    ];
    await this.audited(audits, { wait: false });
    if (rearm) await this.scheduler.arm();
  }

  /** A parked host's wait ran out: it leaves the queue and is answered with the group's refusal. */
  private expire(name: string, id: string) {
    this.saveQueue(name, dequeue(this.m.queues.get(name) ?? [], id));
    this.waiters.settle(id, { granted: false, group: name });
    if (this.armQueue(this.clock())) void this.scheduler.arm().catch(() => undefined);
  }

  /**
   * Keeps the queue's one timer at the earliest moment any group needs a look with no request to
   * prompt it. The timer runs on real time while decisions use `clock`, so the distance is kept.
   */
  private armQueue(now: number): boolean {
    let at = Infinity;
    for (const [name, g] of this.m.groups) at = Math.min(at, nextWake(g, this.m.queues.get(name) ?? [], now) ?? Infinity);
    if (at === Infinity) {
      // Unknown after a wake (undefined): cancel once, in case a timer was left from before.
      if (this.queueTimerAt !== null) this.scheduler.cancel(QUEUE_TIMER);
      this.queueTimerAt = null;
      return false;
    }
    const due = Date.now() + Math.max(0, at - now);
    if (due === this.queueTimerAt) return false;
    this.scheduler.schedule(QUEUE_TIMER, due);
    this.queueTimerAt = due;
    return true;
  }

  private queueTimerAt: number | null | undefined;

  /** Stores a queue's added and removed entries, then mirrors it in memory. */
  private saveQueue(name: string, after: Queue) {
    const before = this.m.queues.get(name) ?? [];
    if (before === after) return;
    // Entries are immutable: a new object under an id already stored (a host parking again after
    // its wait ran out) replaces the old one, so compare objects, not ids.
    const kept = new Set(after);
    const was = new Set(before);
    const ids = new Set(after.map((e) => e.id));
    for (const e of before) if (!kept.has(e) && !ids.has(e.id)) this.kv.delete(KEY.queued(name, e.id));
    for (const e of after) if (!was.has(e)) this.kv.put(KEY.queued(name, e.id), e);
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
   * The registry entry for an id: servers' identities arrive from their ledgers' outboxes, so
   * the host path never reads D1. Only ids no server has registered are refused, unless allowed.
   */
  private client(config: FleetConfig, id: string): { ok: true; entry: ClientEntry | null } | FleetLockFailure {
    const entry = this.kv.get<ClientEntry>(KEY.client(id)) ?? null;
    if (entry || config.allow_unknown_ids) return { ok: true, entry };
    return failure("unknown_client", `no server of this fleet is registered with fleetlock_id '${id}'`);
  }

  private applyIdentity(serverId: string, identity: ServerIdentity): boolean {
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
      // Confirmed: the reservation that guarded the id until now is no longer needed.
      this.kv.delete(KEY.reservation(identity.fleetlock_id));
      this.scheduler.cancel(KEY.reservation(identity.fleetlock_id));
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
