/**
 * The coordinator's storage: its keys (in the format of ./storage-format.ts), their load and
 * save, and the in-memory mirror the host path reads. Storage is the synchronous KV API, so a caller's read-check-write runs in one turn
 * that no other request can interleave with, and the output gate holds each reply until its write
 * is durable. This object is the only writer, and storage is written first and memory after, so
 * the mirror cannot drift; it is rebuilt whenever the object wakes.
 */
import type { FleetSettings, ServerIdentity } from "../model/fleet";
import type { Queue, QueueEntry } from "./queue";
import type { GroupState } from "./semaphore";
import { COORDINATOR_FORMAT, FORMAT_KEY, openCoordinatorFormat } from "./storage-format";

export interface FleetConfig extends FleetSettings {
  /** SHA-256 of the current FleetLock key; null until an admin creates one. */
  key_hash: string | null;
}

/** What a registered FleetLock id belongs to. */
export interface ClientEntry {
  server_id: string;
  hostname: string;
  reboot_group: string;
}

/** What a server's ledger says it holds, when its coordinator asks (./names.ts). */
export interface HeldNames {
  fleet_id: string;
  /** Not removed, and no removal's cleanup under way. */
  live: boolean;
  /** As the ledger would deliver it now (fleetlock_id null unless live). */
  identity: ServerIdentity;
}

/** How the coordinator asks a server's ledger what it holds (a read: no effect leaves). */
export type AskLedger = (serverId: string) => Promise<HeldNames | null>;

/**
 * A hostname of the fleet: held by a registered server (`until` null), or reserved for a
 * registration until `until`, when the server's ledger is asked whether it committed.
 */
interface HostnameClaim {
  server_id: string;
  until: number | null;
}

/** A fleetlock_id held for a registration or PATCH until the server's ledger confirms it. */
export interface Reservation {
  server_id: string;
  until: number;
}

export const KEY = {
  config: "config",
  group: (name: string) => `group:${name}`,
  client: (id: string) => `client:${id}`,
  server: (id: string) => `server:${id}`,
  /** Also the name of the reservation's timer. */
  reservation: (id: string) => `reservation:${id}`,
  /** A hostname's claim; also the name of a reserved claim's timer. */
  hostname: (name: string) => `hostname:${name}`,
  /** The revision of the last fleet spec applied to the groups (src/fleetlock/spec-groups.ts). */
  specRev: "spec_rev",
  /** Until when a fleet deletion under way keeps registrations out (./names.ts). */
  sealed: "sealed_until",
  // Group names cannot hold ':', so the first ':' after the group ends it.
  queued: (group: string, id: string) => `queue:${group}:${id}`,
} as const;

/** A group nobody waits in: one value, so saving it again is seen as no change. */
const NO_QUEUE: Queue = Object.freeze([]);

/** Config and groups (a handful of small objects) and the parked hosts, so the host path reads no storage but the registry. */
interface Mirror {
  config: FleetConfig | null;
  groups: Map<string, GroupState>;
  /** Which group holds a slot for an id (an id holds at most one in the fleet). */
  heldIn: Map<string, string>;
  /** Parked hosts per group, FIFO; each entry is its own storage key. */
  queues: Map<string, Queue>;
}

export class CoordinatorStore {
  private mem: Mirror | null = null;
  /** Whether the storage carries this code's format stamp; unknown until the object loads. */
  private stamped: boolean | undefined;

  constructor(
    private readonly storage: DurableObjectStorage,
    /** A group's slots, settings or queue changed (in the caller's turn): open console pages are told. */
    private readonly onChange: (group: string) => void = () => {},
  ) {}

  /** Every read goes through here: the format is checked once, before anything is read. */
  private get kv() {
    if (this.stamped === undefined) this.stamped = openCoordinatorFormat(this.storage.kv);
    return this.storage.kv;
  }

  /** Every write goes through here: the first one stamps the format, so an empty object stays empty. */
  private get out() {
    const kv = this.kv;
    if (!this.stamped) {
      kv.put(FORMAT_KEY, COORDINATOR_FORMAT);
      this.stamped = true;
    }
    return kv;
  }

  private get m(): Mirror {
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

  // ---- fleet settings and key ----

  get config(): FleetConfig | null {
    return this.m.config;
  }

  putConfig(config: FleetConfig) {
    this.out.put(KEY.config, config);
    this.m.config = config;
  }

  /** Keeps the stored settings equal to D1's, preserving the key; writes only what changed. */
  syncSettings(settings: FleetSettings): FleetConfig {
    const current = this.m.config;
    const next: FleetConfig = { ...settings, key_hash: current?.key_hash ?? null };
    if (
      !current ||
      current.lock_ttl_s !== next.lock_ttl_s ||
      current.allow_unknown_ids !== next.allow_unknown_ids ||
      current.default_group_slots !== next.default_group_slots ||
      JSON.stringify(current.disruption_budget ?? null) !== JSON.stringify(next.disruption_budget ?? null) ||
      current.fleet_id !== next.fleet_id
    ) {
      this.putConfig(next);
    }
    return next;
  }

  // ---- groups and their holders ----

  group(name: string): GroupState | undefined {
    return this.m.groups.get(name);
  }

  /** The groups, as a copy: callers save while they walk it. */
  groups(): [string, GroupState][] {
    return [...this.m.groups];
  }

  /** The group where the id holds a slot, if any. */
  heldIn(id: string): string | undefined {
    return this.m.heldIn.get(id);
  }

  /** Stores a group, then mirrors it and its holders' index in memory. */
  saveGroup(name: string, after: GroupState) {
    const before = this.m.groups.get(name);
    if (before === after) return;
    this.onChange(name);
    this.out.put(KEY.group(name), after);
    this.m.groups.set(name, after);
    const is = new Set(after.holders.map((h) => h.id));
    for (const h of before?.holders ?? []) if (!is.has(h.id)) this.m.heldIn.delete(h.id);
    for (const id of is) this.m.heldIn.set(id, name);
  }

  /** Deletes an idle group's configuration (a fleet spec pruned it); callers check it has no holders or queue. */
  deleteGroup(name: string) {
    if (!this.m.groups.has(name)) return;
    this.out.delete(KEY.group(name));
    this.m.groups.delete(name);
  }

  /** The fleet intent revision of the last fleet spec whose groups were applied (0: none). */
  get specRev(): number {
    return this.kv.get<number>(KEY.specRev) ?? 0;
  }

  set specRev(rev: number) {
    this.out.put(KEY.specRev, rev);
  }

  // ---- the queues of parked hosts ----

  queue(name: string): Queue {
    return this.m.queues.get(name) ?? NO_QUEUE;
  }

  /** The groups with parked hosts, as a copy: callers save while they walk it. */
  queues(): [string, Queue][] {
    return [...this.m.queues];
  }

  /** Stores a queue's added and removed entries, then mirrors it in memory. */
  saveQueue(name: string, after: Queue) {
    const before = this.queue(name);
    if (before === after || (before.length === 0 && after.length === 0)) return;
    this.onChange(name);
    // Entries are immutable: a new object under an id already stored (a host parking again after
    // its wait ran out) replaces the old one, so compare objects, not ids.
    const kept = new Set(after);
    const was = new Set(before);
    const ids = new Set(after.map((e) => e.id));
    for (const e of before) if (!kept.has(e) && !ids.has(e.id)) this.out.delete(KEY.queued(name, e.id));
    for (const e of after) if (!was.has(e)) this.out.put(KEY.queued(name, e.id), e);
    if (after.length) this.m.queues.set(name, after);
    else this.m.queues.delete(name);
  }

  // ---- the FleetLock identity registry (read from storage, not mirrored: it grows with the fleet) ----

  /** fleetlock_id → the server it belongs to. */
  readonly clients = this.records<ClientEntry>(KEY.client);
  /** server id → its FleetLock identity, as its ledger last delivered it. */
  readonly servers = this.records<ServerIdentity>(KEY.server);
  /** fleetlock_id → the server it is held for until confirmed. */
  readonly reservations = this.records<Reservation>(KEY.reservation);
  /** hostname → the server that holds it, or the registration it is reserved for. */
  readonly hostnames = this.records<HostnameClaim>(KEY.hostname);

  /** The registrations in flight: hostnames reserved for a server whose ledger has not been asked yet. */
  hasReservedHostname(): boolean {
    for (const [, claim] of this.kv.list<HostnameClaim>({ prefix: "hostname:" })) if (claim.until !== null) return true;
    return false;
  }

  /** Until when a fleet deletion keeps registrations out (null: it does not). */
  get sealedUntil(): number | null {
    return this.kv.get<number>(KEY.sealed) ?? null;
  }

  set sealedUntil(until: number | null) {
    if (until === null) this.out.delete(KEY.sealed);
    else this.out.put(KEY.sealed, until);
  }

  private records<T>(key: (id: string) => string) {
    return {
      get: (id: string) => this.kv.get<T>(key(id)),
      put: (id: string, value: T) => this.out.put(key(id), value),
      delete: (id: string) => this.out.delete(key(id)),
    };
  }

  /** Everything goes (the fleet was deleted): storage, alarm and mirror. */
  async wipe() {
    await this.storage.deleteAlarm();
    await this.storage.deleteAll();
    this.mem = null;
    this.stamped = undefined;
  }
}
